"""A worker killed with SIGKILL mid-run, with real processes (redis-server, Celery workers, celery beat) and the
settings' defaults: the run is noticed lost and trains again from its latest checkpoint by itself, at once when
the worker comes back under the same name (it reclaims its runs), and within the heartbeat timeout plus a reaper
period when another worker has to take it."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RedisServer
from tests.e2e.stack import REPO, Site

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHECKPOINT_INTERVAL = 2_000  # as often as a run of 2M steps may save (1,000 checkpoints a run at most)

MAKE_RUN = f"""
from django.contrib.auth import get_user_model
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment
owner = get_user_model().objects.create_user("kill-owner")
experiment = Experiment.objects.create(
    owner=owner, name="killed", algorithm="dqn", env_id="CartPole-v1", total_steps=2_000_000, device="cpu",
    checkpoint_interval={CHECKPOINT_INTERVAL}, eval_interval=0,
    hyperparameters=dict(learning_starts=200, batch_size=32, buffer_size=10_000, train_frequency=4,
                         gradient_steps=1, hidden_layers="32,32"))
result = [run.pk for run in lifecycle.launch(experiment)][0]
"""


class Stack:
    """redis-server, celery beat and workers on a fresh SQLite database, read directly by the test."""

    def __init__(self, var: Path, redis_url: str):
        self.var = var
        self.env = {key: value for key, value in os.environ.items()
                    if key not in ("REDIS_URL", "DATABASE_URL") and not key.startswith("RLWEB_")}
        self.env.update(REDIS_URL=redis_url, RLWEB_VAR_DIR=str(var), PYTHONUNBUFFERED="1",
                        DJANGO_SETTINGS_MODULE="rlweb.settings")
        self.processes: list[subprocess.Popen] = []
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO, env=self.env, check=True,
                       capture_output=True, timeout=300)

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = (self.var / f"{name}.log").open("a")
        process = subprocess.Popen([sys.executable, "-m", "celery", "-A", "rlweb", *args, "--loglevel", "INFO"],
                                   cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def worker(self, node: str) -> subprocess.Popen:
        return self.start(node, "worker", "--pool", "solo", "-Q", "cpu", "-n", f"{node}@%h", "--without-gossip",
                          "--without-mingle")

    def run_row(self, run_id: int) -> dict:
        with sqlite3.connect(self.var / "db.sqlite3", timeout=30) as database:
            status, steps, start_step, attempts, error = database.execute(
                "SELECT status, steps_done, start_step, attempts, error FROM experiments_run WHERE id = ?",
                (run_id,)).fetchone()
            checkpoints = database.execute("SELECT max(step) FROM experiments_checkpoint WHERE run_id = ?",
                                           (run_id,)).fetchone()[0]
        return dict(status=status, steps=steps, start_step=start_step, attempts=attempts, error=error,
                    checkpoint=checkpoints or 0)

    def wait(self, run_id: int, condition, seconds: float) -> tuple[float, dict]:
        started = time.monotonic()
        while True:
            row = self.run_row(run_id)
            if condition(row):
                return time.monotonic() - started, row
            assert time.monotonic() - started < seconds, (row, self.logs())
            time.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in self.var.glob("*.log"))

    def stop(self):
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def training_again(attempts: int):
    return lambda row: row["status"] == "running" and row["attempts"] == attempts and row["steps"] > row["start_step"]


def test_a_killed_workers_run_is_lost_and_trains_again_by_itself(tmp_path):
    redis_server = RedisServer().start()
    stack = Stack(tmp_path, redis_server.url)
    try:
        with contextlib.closing(Site("", tmp_path, stack.env)) as site:
            run_id = site.orm(MAKE_RUN)
        stack.start("beat", "beat", "--schedule", str(tmp_path / "celerybeat-schedule"))
        first = stack.worker("first")
        stack.wait(run_id, lambda row: row["status"] == "running" and row["checkpoint"] > 0, seconds=240)

        # killed, and started again under the same name (as a supervisor does): it reclaims the run at once
        os.kill(first.pid, signal.SIGKILL)
        killed = time.monotonic()
        stack.worker("first")
        lost_after, row = stack.wait(run_id, lambda row: row["attempts"] == 2 or row["status"] != "running", 120)
        training_after, row = stack.wait(run_id, training_again(attempts=2), seconds=120)
        training_after = time.monotonic() - killed
        assert row["start_step"] > 0 and row["start_step"] % CHECKPOINT_INTERVAL == 0  # from its checkpoint
        print(f"same worker name: lost {lost_after:.1f} s after the SIGKILL, training again after "
              f"{training_after:.1f} s")

        # killed for good: another worker takes the run once the lost-run reaper (celery beat) finds its heartbeat stale
        stack.wait(run_id, lambda row: row["checkpoint"] > row["start_step"], seconds=240)
        os.killpg(stack.processes[-1].pid, signal.SIGKILL)
        killed = time.monotonic()
        stack.worker("second")
        # lost, then queued and claimed again in moments: a poll may see it running again on attempt 3 already
        lost_after, _ = stack.wait(run_id, lambda row: row["attempts"] == 3 or row["status"] != "running", 120)
        _, row = stack.wait(run_id, training_again(attempts=3), seconds=120)
        training_after = time.monotonic() - killed
        print(f"another worker: lost {lost_after:.1f} s after the SIGKILL, training again after "
              f"{training_after:.1f} s")
        assert lost_after < 60  # the bound; 30 s timeout + a 10 s sweep at most
    finally:
        stack.stop()
        redis_server.remove()
