"""The Celery task that trains one run.

The task receives only the run id. It claims the run (queued -> running) with a conditional update, so
a second delivery of the same message exits at once; it then builds the agent from the stored
experiment, trains it in this process with a Redis sink, and records the outcome on the row.
"""

from __future__ import annotations

import logging
import socket
import tempfile
import traceback
import uuid

import trainer
from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError
from trainer.events import make_event

from rlweb.celery import app
from rlweb.experiments.live import RedisSink
from rlweb.experiments.models import Run

logger = logging.getLogger(__name__)


def enqueue(run: Run) -> None:
    """Queue a run on its device's queue once the current transaction commits; its task id is stored first."""
    if not run.task_id:
        run.task_id = str(uuid.uuid4())
        run.save(update_fields=["task_id"])
    queue = run.experiment.queue_name

    def send():
        try:
            train_run.apply_async(args=[run.pk], task_id=run.task_id, queue=queue)
        except OperationalError as error:
            logger.error("run %s: cannot reach the task queue: %s", run.pk, error)
            run.mark_failed(f"Could not queue the run: the task queue (Redis) is unreachable: {error}")

    transaction.on_commit(send)


@app.task(name="rlweb.train_run")
def train_run(run_id: int) -> str:
    run = Run.claim(run_id, worker_host=socket.gethostname())
    if run is None:
        logger.info("run %s is not queued any more (cancelled, or another delivery has it): skipping", run_id)
        return "skipped"
    import torch

    torch.set_num_threads(settings.TORCH_THREADS)  # one run per process; threads set on purpose, not by default
    execute(run)
    return run.status


def execute(run: Run) -> None:
    """Train a claimed run to the end and record how it ended."""
    experiment = run.experiment
    sink = RedisSink(run)
    try:
        agent = trainer.make(experiment.algorithm, experiment.env_id, seed=run.seed, device=experiment.device,
                             **experiment.hyperparameters)
        run.record_device(str(agent.device))
        with tempfile.TemporaryDirectory(prefix=f"rlweb-run{run.pk}-") as folder:
            summary = agent.learn(run.total_steps, sink=sink, eval_interval=experiment.eval_interval,
                                  eval_episodes=experiment.eval_episodes,
                                  checkpoint_interval=experiment.checkpoint_interval, checkpoint_dir=folder)
    except Exception as error:
        logger.exception("run %s failed", run.pk)
        message, details = f"{type(error).__name__}: {error}", traceback.format_exc()
        if not sink.ended:  # failed before the runner started: followers still need to hear the end
            sink.emit(make_event("failed", sink.steps_done, 0.0, {"error": message, "traceback": details}))
        sink.close()
        run.mark_failed(message, details)
        return
    sink.close()
    run.mark_finished(summary)


@app.task(name="rlweb.mark_lost_runs")
def mark_lost_runs() -> int:
    """Runs whose worker stopped sending heartbeats become `lost` (for a periodic schedule)."""
    return Run.mark_lost_runs()
