"""The processes that never train (the web server until a page needs an algorithm, beat, a Django shell) start without
PyTorch: it costs each about 2 s of CPU and 180 MB, and the pages that list runs, show a record or take a chore do not
need it. `trainer` imports it with the first algorithm module, checkpoint or training run (trainer/__init__.py).
Nor do they start with scipy and rliable (the statistics across tasks) or TensorBoard's reader (a log's import):
without them the web server's start took 3.1-3.4 s of CPU and 107 MB instead of 4.7-5.5 s and 184 MB (2026-11-29)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

STARTS = """
import sys
import django
HEAVY = ("torch", "scipy", "rliable", "tensorboard")
django.setup()
from rlweb.celery import app
app.loader.import_default_modules()  # the tasks modules, and Django's checks with every template tag library
app.finalize()
import rlweb.asgi, rlweb.urls
import trainer
print(" ".join(name for name in HEAVY if name in sys.modules) or "none")
"""


def test_the_web_app_and_beat_start_without_pytorch_scipy_or_tensorboard():
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    done = subprocess.run([sys.executable, "-c", STARTS], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**env, "DJANGO_SETTINGS_MODULE": "rlweb.settings"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "none", f"an import at the top of a module brought in {done.stdout.strip()}"


def test_the_library_still_reaches_what_needs_pytorch_through_the_package():
    import trainer
    from trainer.checkpoint import CheckpointError, load_checkpoint
    from trainer.runner import TrainingError

    assert trainer.load is load_checkpoint
    assert trainer.CheckpointError is CheckpointError and trainer.TrainingError is TrainingError
    with pytest.raises(AttributeError, match="no_such_name"):
        trainer.no_such_name
