"""The worker's side of Celery, kept thin: each task and signal hands over to lifecycle.py.

`train_run` receives only the run id; lifecycle.train claims it with a conditional update (so a second
delivery exits at once), trains it with a heartbeat thread, records the outcome and announces the end
(`run_ended`, which the sweeps app hears). When a worker starts, it reclaims the runs its own earlier
incarnation held (killed or crashed): they are lost at once, and it writes itself into the worker registry
(workers.py) until it shuts down.

This app's periodic chores, each a beat entry of its own (rlweb/celery.py): `reap_lost_runs`,
`dispatch_runs` (the fair-share scheduler's safety net) and `fail_stale_checkpoint_jobs`. The sweeps app has its own (rlweb/sweeps/tasks.py). Pages never do their work.
"""

from __future__ import annotations

from celery.signals import worker_ready, worker_shutdown
from django.utils import timezone

from rlweb.celery import app
from rlweb.experiments import checkpoint_jobs, lifecycle, scheduler, workers

PROCESS_STARTED = timezone.now()  # runs claimed before this belong to an earlier incarnation
registration: workers.Registration | None = None  # this worker's registry entry, once it is ready


@app.task(name=scheduler.TRAIN_TASK, bind=True)
def train_run(self, run_id: int) -> str:
    return lifecycle.train(run_id, worker=self.request.hostname or "")


@app.task(name=checkpoint_jobs.JOB_TASK, bind=True)
def checkpoint_job(self, job_id: int) -> str:
    queue = (self.request.delivery_info or {}).get("routing_key") or ""
    return checkpoint_jobs.do(job_id, worker=self.request.hostname or "", queue=queue)


@app.task(name="rlweb.compare_statistics", time_limit=10 * 60)
def compare_statistics(key: str) -> str:
    from rlweb.experiments import compare_stats  # rliable and scipy, imported by the workers that do this only

    return compare_stats.compute_and_store(key)


@app.task(name="rlweb.reap_lost_runs")
def reap_lost_runs() -> int:
    """A periodic chore (celery beat): runs whose heartbeat went stale become lost (and resume by themselves).
    Returns how many were lost."""
    return lifecycle.reap_lost_runs()


@app.task(name="rlweb.fail_stale_checkpoint_jobs")
def fail_stale_checkpoint_jobs() -> int:
    """A periodic chore (celery beat): checkpoint jobs left running by a worker that went away end failed."""
    return checkpoint_jobs.fail_stale()


@app.task(name="rlweb.dispatch_runs")
def dispatch_runs() -> int:
    """A periodic chore (celery beat), the scheduler's safety net: queued runs go to free workers, fairly (a launch,
    a resume and a worker's end dispatch at once too). Returns how many were sent."""
    return len(scheduler.dispatch())


@worker_ready.connect
def reclaim_runs(sender, **kwargs) -> None:
    """A worker that starts reclaims its earlier incarnation's runs."""
    lifecycle.reclaim(sender.hostname, started_before=PROCESS_STARTED)


@worker_ready.connect
def register_worker(sender, **kwargs) -> None:
    """The worker writes itself into the registry with the queues it consumes (its -Q), then takes the next run
    waiting for it, if any (it has just become a free worker)."""
    global registration
    registration = workers.Registration(sender.hostname, list(sender.app.amqp.queues.consume_from)).start()
    scheduler.dispatch()


@worker_shutdown.connect
def unregister_worker(sender, **kwargs) -> None:
    if registration is not None:
        registration.stop()
