"""Training that raises (an env that breaks, out of memory), with the real task: the run ends `failed` with
its error and traceback on its page, its last checkpoint stays downloadable, and the next run trains."""

import io
import zipfile

import pytest
from django.urls import reverse

from rlweb.experiments.models import Run
from rlweb.experiments.tasks import train_run
from tests.web import envs_for_outage_tests  # noqa: F401  (registers the test envs)


@pytest.mark.parametrize("env_id, error, cause", [
    ("rlweb-test/BreaksAt300-v0", "the environment rlweb-test/BreaksAt300-v0 raised RuntimeError at step 299",
     "RuntimeError: test env: broke at step 300"),
    ("rlweb-test/OutOfMemoryAt300-v0", "out of memory at step 299", "MemoryError: test env: out of memory")])
def test_a_run_whose_training_raises_fails_with_its_traceback_and_keeps_its_checkpoints(
        make_experiment, owner_client, queued_run, env_id, error, cause):
    experiment = make_experiment(env_id=env_id, total_steps=1_000, eval_interval=0, checkpoint_interval=100)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=1_000, task_id="breaks")
    assert train_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error.startswith(error) and run.finished_at
    assert "envs_for_outage_tests.py" in run.traceback and cause in run.traceback
    page = owner_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert error in page and 'id="run-traceback"' in page
    checkpoint = run.latest_checkpoint()
    assert checkpoint.step == 200
    download = owner_client.get(checkpoint.get_absolute_url())
    assert download.status_code == 200
    assert "model.safetensors" in zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content))).namelist()
    assert checkpoint.load_agent().steps_done == 200

    assert train_run(queued_run.pk) == "succeeded"  # the worker takes the next run
