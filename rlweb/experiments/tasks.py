"""The Celery task that trains one run.

The task receives only the run id. It claims the run (queued -> running) with a conditional update, so
a second delivery of the same message exits at once; it then builds the agent from the stored
experiment, trains it in this process with a Redis sink, and records the outcome on the row.

A resumed run (cancelled or lost, then queued again with `resume`) is claimed by `Run.claim_resume`
instead: the agent is loaded from the run's latest checkpoint and trains on up to `total_steps`, its
events numbered on after the ones kept from before that checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import tempfile
import threading
import traceback
import uuid

import redis
import trainer
from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError
from trainer.events import make_event

from rlweb.celery import app
from rlweb.experiments import live
from rlweb.experiments.live import RedisSink
from rlweb.experiments.models import Checkpoint, Run

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


def resume(run: Run) -> bool:
    """Queue a cancelled or lost run to go on from its last checkpoint; False when it cannot be resumed."""
    if not run.request_resume():
        return False
    client = live.redis_client()
    try:  # the stop flag of the cancel it comes back from, and the old stream: the new events reuse its ids
        client.delete(live.stop_key(run.pk), live.stream_key(run.pk))
    except redis.RedisError as error:
        logger.warning("run %s: cannot clear its stop flag (%s); it may stop at once", run.pk, error)
    enqueue(run)
    return True


@app.task(name="rlweb.train_run")
def train_run(run_id: int) -> str:
    host = socket.gethostname()
    if Run.objects.filter(pk=run_id, resume_requested=True).exists():
        claimed = Run.claim_resume(run_id, worker_host=host)
        run, checkpoint = claimed if claimed else (None, None)
    else:
        run, checkpoint = Run.claim(run_id, worker_host=host), None
    if run is None:
        logger.info("run %s is not queued any more (cancelled, or another delivery has it): skipping", run_id)
        return "skipped"
    import torch

    torch.set_num_threads(settings.TORCH_THREADS)  # one run per process; threads set on purpose, not by default
    execute(run, checkpoint)
    return run.status


@contextlib.contextmanager
def stop_on_sigterm(sink: RedisSink):
    """While a run trains, SIGTERM asks its runner to stop as a cancel does: within half a second it saves
    a final checkpoint and the run ends `cancelled`, ready to resume, instead of the process dying
    mid-step. Ctrl-C of `make run` signals the worker's whole process group, this process included.
    Once the run is recorded, the signal goes on to the handler it was taken from (Celery's warm
    shutdown). Only the main thread can take signals (an eager task may run in another)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def request_stop(signum, frame):
        logger.warning("run %s: the worker is shutting down; stopping the run with a final checkpoint", sink.run.pk)
        sink.stop_requested = True
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, request_stop)
    try:
        yield
    finally:  # None: a handler not set from Python, which cannot be put back; the default stands in
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if received:
            signal.raise_signal(signal.SIGTERM)


def execute(run: Run, checkpoint: Checkpoint | None = None) -> None:
    """Train a claimed run to the end (from `checkpoint`, when it resumes) and record how it ended."""
    sink = RedisSink(run)
    with stop_on_sigterm(sink):
        train_and_record(run, checkpoint, sink)


def train_and_record(run: Run, checkpoint: Checkpoint | None, sink: RedisSink) -> None:
    experiment = run.experiment
    try:
        with tempfile.TemporaryDirectory(prefix=f"rlweb-run{run.pk}-") as folder:
            agent = load_agent(run, checkpoint, folder)
            run.record_device(str(agent.device))
            summary = agent.learn(0, end_step=run.total_steps, sink=sink, eval_interval=experiment.eval_interval,
                                  eval_episodes=experiment.eval_episodes,
                                  checkpoint_interval=experiment.checkpoint_interval, checkpoint_dir=folder,
                                  video_interval=experiment.video_interval)
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


def load_agent(run: Run, checkpoint: Checkpoint | None, folder: str):
    """A new agent for the run's experiment, or the one saved in `checkpoint` (copied out of storage)."""
    experiment = run.experiment
    if checkpoint is None:
        return trainer.make(experiment.algorithm, experiment.env_id, seed=run.seed, device=experiment.device,
                            **experiment.hyperparameters)
    agent = checkpoint.load_agent(device=experiment.device)
    if not agent.seconds_trained:  # saved before checkpoints held the run's clock: go on from its event's time
        reported = checkpoint.reported_event()
        agent.seconds_trained = reported.time if reported else 0.0
    return agent


@app.task(name="rlweb.mark_lost_runs")
def mark_lost_runs() -> int:
    """Runs whose worker stopped sending heartbeats become `lost` (for a periodic schedule)."""
    return Run.mark_lost_runs()
