"""The worker's side of Celery, kept thin: each task and signal hands over to lifecycle.py.

`train_run` receives only the run id; lifecycle.train claims it with a conditional update (so a second
delivery exits at once), trains it with a heartbeat thread and records the outcome. When a worker
starts, it reclaims the runs its own earlier incarnation held (killed or crashed): they are lost at once,
and it writes itself into the worker registry (workers.py) until it shuts down.
"""

from __future__ import annotations

import logging

from celery.signals import worker_ready, worker_shutdown
from django.utils import timezone

from rlweb.celery import app
from rlweb.experiments import checkpoint_jobs, lifecycle, workers
from rlweb.sweeps import study

logger = logging.getLogger(__name__)

PROCESS_STARTED = timezone.now()  # runs claimed before this belong to an earlier incarnation
registration: workers.Registration | None = None  # this worker's registry entry, once it is ready


@app.task(name=lifecycle.TRAIN_TASK, bind=True)
def train_run(self, run_id: int) -> str:
    status = lifecycle.train(run_id, worker=self.request.hostname or "", make_sink=study.sink_for)
    try:  # a sweep's trial: record it and start the next one now rather than at the periodic sweep
        study.run_ended(run_id)
    except Exception:
        logger.exception("run %s: cannot advance its sweep; the periodic sweep will", run_id)
    return status


@app.task(name=checkpoint_jobs.JOB_TASK, bind=True)
def checkpoint_job(self, job_id: int) -> str:
    return checkpoint_jobs.do(job_id, worker=self.request.hostname or "")


@app.task(name="rlweb.mark_lost_runs")
def mark_lost_runs() -> int:
    """The periodic sweep (celery beat): lost runs, runs whose sending failed, checkpoint jobs left running, and
    the hyperparameter sweeps' trials."""
    checkpoint_jobs.fail_stale()
    lost = lifecycle.sweep()
    study.advance_all()  # hyperparameter sweeps: trials to record and to start
    return lost


@worker_ready.connect
def reclaim_runs(sender, **kwargs) -> None:
    """A worker that starts reclaims its earlier incarnation's runs, and sends the runs whose sending failed
    (it has just reached the queue)."""
    lifecycle.reclaim(sender.hostname, started_before=PROCESS_STARTED)
    lifecycle.send_unsent()


@worker_ready.connect
def register_worker(sender, **kwargs) -> None:
    """The worker writes itself into the registry with the queues it consumes (its -Q)."""
    global registration
    registration = workers.Registration(sender.hostname, list(sender.app.amqp.queues.consume_from)).start()


@worker_shutdown.connect
def unregister_worker(sender, **kwargs) -> None:
    if registration is not None:
        registration.stop()
