"""The life of a run, top to bottom: launch, claim, heartbeat, train, reap lost runs, reclaim, resume, cancel, delete.

    launch ──> queued ──claim──> running ──> succeeded | failed | cancelled | pruned (a sweep's trial)
                 ^                  │  no heartbeat for HEARTBEAT_TIMEOUT s (the reaper), or its worker restarted
                 │                  v  (reclaim)
                 └───── resume ── lost | cancelled      a lost run resumes by itself, up to its experiment's limit

Every change of a run's status is one conditional UPDATE: it names the status it leaves (and, for a
running run, the attempt it belongs to), so of two processes racing for a run (a cancel and a claim, a
resume and a delete, two reapers) exactly one wins and the other sees that it lost. Cancel sets the
`stop_requested` column whatever the state; the Redis stop key is only its fast path.

Layers point one way: views call this module; it changes the models, streams through sink.py and leaves
sending the training task to the scheduler (scheduler.py, fair share among users); tasks.py (the worker's side of Celery) calls back into it. Models queue nothing.
A run that reaches a final state is announced with the `run_ended` signal (signals.py): other apps (sweeps)
listen to it; this app imports none of them.
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
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from trainer.events import make_event
from trainer.params import interval_errors

from rlweb.celery import app  # revoking a queued run's message
from rlweb.experiments import history, redis_keys, scheduler, signals, storage_use
from rlweb.experiments.sink import RedisSink, worker_sink
from rlweb.experiments.models import Checkpoint, Experiment, Run

logger = logging.getLogger(__name__)

Status = Run.Status


# --- launch -------------------------------------------------------------------------------------------------

def launch(experiment: Experiment) -> list[Run]:
    """One run per seed, each queued once the surrounding transaction commits."""
    runs = [Run.objects.create(experiment=experiment, seed=seed, total_steps=experiment.total_steps)
            for seed in range(experiment.num_seeds)]
    for run in runs:
        enqueue(run)
    return runs


def enqueue(run: Run) -> None:
    """A queued run waits in the database for a free worker: once the current transaction commits, the scheduler
    (scheduler.py) decides whether it goes now, fairly among users. Its task id is stored first."""
    if not run.task_id:
        run.task_id = str(uuid.uuid4())
        Run.objects.filter(pk=run.pk).update(task_id=run.task_id)
    transaction.on_commit(scheduler.dispatch)


# --- claim --------------------------------------------------------------------------------------------------

def claim(run_id: int, worker: str = "") -> tuple[Run, Checkpoint | None] | None:
    """Move a queued run to running for this worker (Celery node name, e.g. celery@host) and return it with the
    checkpoint it goes on from (None: from scratch). None when it is not queued any more (cancelled, or
    another delivery got it); a run cancelled while its message waited ends `cancelled` here."""
    now = timezone.now()
    if Run.objects.filter(pk=run_id, status=Status.QUEUED, stop_requested=True).update(
            status=Status.CANCELLED, finished_at=now):
        announce_end(run_id)
    resuming = Run.objects.filter(pk=run_id, resume_requested=True).exists()
    with transaction.atomic():
        claimed = Run.objects.filter(pk=run_id, status=Status.QUEUED, stop_requested=False,
                                     resume_requested=resuming).update(
            status=Status.RUNNING, resume_requested=False, worker_host=socket.gethostname()[:200],
            worker_node=worker[:200], started_at=now, heartbeat_at=now, finished_at=None, error="", traceback="",
            send_failed=False, **attempt_fields(resuming, now))
        if not claimed:
            return None
        run = Run.objects.select_related("experiment").get(pk=run_id)
        checkpoint = run.latest_checkpoint() if resuming else None
        forget_dead_attempt(run, checkpoint)  # again: a lost run's worker may have gone on reporting
    if resuming:  # a stop key left from before the resume (Redis was down then) would stop it at once
        try:  # a cancel pressed since is in the database: the heartbeat passes it on
            redis_keys.redis_client().delete(redis_keys.stop_key(run.pk))
        except redis.RedisError as error:
            logger.warning("run %s: cannot clear an old stop key (%s)", run.pk, error)
    return run, checkpoint


def attempt_fields(resuming: bool, now) -> dict:
    """A first attempt starts the run's clock; a resumed one counts one attempt more and keeps the first start."""
    if resuming:
        return {"first_started_at": Coalesce("first_started_at", Value(now)), "attempts": F("attempts") + 1}
    return {"first_started_at": now, "attempts": 1, "earlier_attempts_seconds": 0.0, "steps_done": 0,
            "start_step": 0, "auto_resumes": 0}


def forget_dead_attempt(run: Run, checkpoint: Checkpoint | None, after_step: int | None = None) -> None:
    """Forget what the run reported after `checkpoint` (everything without one; after env step `after_step` when
    given: a logged run's script going on from there), and raise `last_seq` above every seq an earlier attempt
    may have sent (stored, or only streamed before its worker died), so the next attempt's events number on after
    all of them, one seq apart: a page still following the dead attempt then sees a gap, and the live stream
    tells it to reload (the forgotten seqs are recorded for that)."""
    sent = max(run.last_seq, run.stored_seq(), streamed_seq(run.pk))
    kept = (history.forget_after(run, checkpoint) if after_step is None
            else history.forget_after_step(run, after_step))
    forgotten, high = list(run.forgotten_seqs), sent
    if sent > kept and not any(after <= kept and sent <= through for after, through in forgotten):
        high = sent + 1
        forgotten.append([kept, high])
    run.last_seq, run.forgotten_seqs = high, forgotten
    Run.objects.filter(pk=run.pk).update(last_seq=high, forgotten_seqs=forgotten)


def streamed_seq(run_id: int) -> int:
    """The seq of the last event in the run's live stream (0: none, or Redis unreachable)."""
    try:
        last = redis_keys.redis_client().xrevrange(redis_keys.stream_key(run_id), count=1)
    except redis.RedisError:
        return 0
    return int(last[0][0].split("-")[0]) if last else 0


# --- heartbeat ----------------------------------------------------------------------------------------------

class Heartbeat:
    """While a run trains, a daemon thread of the worker writes its heartbeat every `HEARTBEAT_SECONDS`,
    whatever the training loop is doing (a long training phase, an ES generation, a stuck env), and passes a
    cancel stored in the database on to the sink (Redis being the fast path, read by the sink itself).
    A dead worker stops beating: the lost-run reaper marks the run lost after `HEARTBEAT_TIMEOUT` seconds.
    The beat names the attempt: when the run is no longer this attempt's (lost and resumed elsewhere), the
    thread asks the runner to stop. The thread has its own database connection and closes it at the end."""

    def __init__(self, run: Run, sink: RedisSink):
        self.run, self.sink = run, sink
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.beat_until_stopped, name=f"heartbeat-run{run.pk}", daemon=True)
        self.failing = False

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stopping.set()
        self.thread.join(timeout=30)

    def beat_until_stopped(self) -> None:
        try:
            while not self.stopping.wait(settings.HEARTBEAT_SECONDS):
                self.beat()
        finally:
            connection.close()

    def beat(self) -> None:
        mine = Run.objects.filter(pk=self.run.pk, status=Status.RUNNING, attempts=self.run.attempts)
        try:
            if not mine.update(heartbeat_at=timezone.now()):
                now = Run.objects.filter(pk=self.run.pk).values("status", "attempts").first()
                if now is not None:  # None: a row this connection cannot see (a test's open transaction)
                    logger.warning("run %s: no longer this worker's (%s, attempt %s); stopping it", self.run.pk,
                                   now["status"], now["attempts"])
                    self.sink.stop_requested = True
                return
            if mine.filter(stop_requested=True).exists():
                self.sink.stop_requested = True
        except DatabaseError as error:
            if not self.failing:
                logger.warning("run %s: cannot write its heartbeat (%s); retrying", self.run.pk, error)
            self.failing = True
            return
        self.failing = False


# --- train (the worker's side) ------------------------------------------------------------------------------

def train(run_id: int, worker: str = "", make_sink=worker_sink) -> str:
    """Claim the run, train it to the end with a heartbeat, and record how it ended, then announce the end
    (`run_ended`); "skipped" when it was not queued any more. Returns the run's status. `make_sink(run)` makes
    the sink it reports to."""
    claimed = claim(run_id, worker)
    if claimed is None:
        logger.info("run %s is not queued any more (cancelled, or another delivery has it): skipping", run_id)
        return "skipped"
    run, checkpoint = claimed
    import torch

    torch.set_num_threads(settings.TORCH_THREADS)  # one run per process; threads set on purpose, not by default
    sink = make_sink(run)
    if run.attempts > 1:  # a resumed attempt: its log says why the one before ended, right after "started"
        sink.after_start = resumed_event(run, checkpoint)
    with Heartbeat(run, sink), stop_on_sigterm(sink):
        recorded = train_and_record(run, checkpoint, sink)
    if recorded:  # after the heartbeat and the SIGTERM handler: a receiver may take its time
        announce_end(run.pk)
    scheduler.dispatch()  # this worker is free: the next run, fairly
    return Run.objects.filter(pk=run.pk).values_list("status", flat=True).first() or "deleted"


def resumed_event(run: Run, checkpoint: Checkpoint | None) -> dict:
    """The "resumed" event of a resumed attempt: which attempt ended, how and why (`Run.interruption`), and the
    step it goes on from (the checkpoint's; 0 and no checkpoint: from scratch)."""
    interrupted = "cancelled" if run.interruption == CANCELLED_REASON else "lost"
    step = checkpoint.step if checkpoint else 0
    return make_event("resumed", step, 0.0, {"attempt": run.attempts - 1, "interrupted": interrupted,
                                             "reason": run.interruption, "from_step": step,
                                             "checkpoint": checkpoint.tag if checkpoint else None})


def announce_end(run_id: int) -> None:
    """Send `run_ended` for a run now in a final state (nothing when it is not: resumed meanwhile, or deleted).
    A receiver that fails is logged; the run's end is already written, and the others still hear of it."""
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status not in Run.FINISHED:
        return
    for receiver, result in signals.run_ended.send_robust(sender=Run, run_id=run_id, status=status):
        if isinstance(result, Exception):
            logger.error("run %s: a receiver of run_ended (%s) failed: %r", run_id, receiver, result,
                         exc_info=(type(result), result, result.__traceback__))


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


def train_and_record(run: Run, checkpoint: Checkpoint | None, sink: RedisSink) -> bool:
    """Train a claimed run (from `checkpoint`, when it resumes); a training error ends it `failed` with the
    traceback, and the worker goes on to its next run. False when its end could not be recorded."""
    from trainer import provenance  # PyTorch's versions and threads: imported where runs train, not in every process

    experiment = run.experiment
    try:
        with tempfile.TemporaryDirectory(prefix=f"rlweb-run{run.pk}-") as folder:
            agent = load_agent(run, checkpoint, folder)
            options = dict(eval_interval=experiment.eval_interval, eval_episodes=experiment.eval_episodes,
                           checkpoint_interval=experiment.checkpoint_interval, video_interval=experiment.video_interval)
            # what made this attempt, on the run and in its checkpoints
            agent.environment = provenance.collect(agent, total_steps=run.total_steps, out=f"run-{run.pk}", **options)
            Run.objects.filter(pk=run.pk).update(device_used=str(agent.device)[:50], environment=agent.environment)
            summary = agent.learn(0, end_step=run.total_steps, sink=sink, checkpoint_dir=folder, **options)
    except Exception as error:
        logger.exception("run %s failed", run.pk)
        # the trainer's own failures (NaN loss, an env that raised, out of memory) already say what happened
        message = str(error) if isinstance(error, trainer.TrainingError) else f"{type(error).__name__}: {error}"
        details = traceback.format_exc()
        try:
            if not sink.ended:  # failed before the runner started: followers still need to hear the end
                sink.emit(make_event("failed", sink.steps_done, 0.0, {"error": message, "traceback": details}))
            sink.close()
            return finish(run, Status.FAILED, error=message, traceback=details)
        except DatabaseError:  # the database is gone: the heartbeat stops and the reaper marks the run lost
            logger.exception("run %s: cannot record its failure", run.pk)
        return False
    sink.close()
    if sink.ended_as and summary.get("status") == "cancelled":
        summary["status"] = sink.ended_as  # stopped by a watcher of its sink (a sweep's pruner), not by a cancel
    return record_summary(run, summary)


def load_agent(run: Run, checkpoint: Checkpoint | None, folder: str):
    """A new agent for the run's experiment, or the one saved in `checkpoint` (copied out of storage)."""
    experiment = run.experiment
    if checkpoint is None:
        return trainer.make(experiment.algorithm, experiment.env_id, seed=run.seed, device=experiment.torch_device,
                            **experiment.hyperparameters)
    agent = checkpoint.load_agent(device=experiment.torch_device)
    if not agent.seconds_trained:  # saved before checkpoints held the run's clock: go on from its event's time
        reported = checkpoint.reported_event()
        agent.seconds_trained = reported.time if reported else 0.0
    return agent


def record_summary(run: Run, summary: dict) -> bool:
    """The runner's summary: succeeded, cancelled or pruned, with the final evaluation. The best return of a resumed
    run is the best of all its attempts."""
    run.refresh_from_db(fields=["eval_return_mean", "eval_return_std", "best_eval_return", "steps_done"])
    fields = {"steps_done": int(summary.get("steps") or run.steps_done)}
    if summary.get("eval_return_mean") is not None or not run.start_step:
        fields.update(eval_return_mean=summary.get("eval_return_mean"), eval_return_std=summary.get("eval_return_std"))
    best = summary.get("best_eval_return")
    if run.start_step and run.best_eval_return is not None:
        best = run.best_eval_return if best is None else max(best, run.best_eval_return)
    status = {"cancelled": Status.CANCELLED, "pruned": Status.PRUNED}.get(summary.get("status"), Status.SUCCEEDED)
    return finish(run, status, best_eval_return=best, heartbeat_at=timezone.now(), **fields)


def finish(run: Run, status: str, **fields) -> bool:
    """End this attempt of a running run; False (nothing written) when the run is no longer this attempt's."""
    ended = Run.objects.filter(pk=run.pk, status=Status.RUNNING, attempts=run.attempts).update(
        status=status, finished_at=timezone.now(), **fields)
    if not ended:
        logger.warning("run %s: attempt %s ended %s, but the run has moved on; not recorded", run.pk, run.attempts,
                       status)
    run.refresh_from_db()
    return bool(ended)


# --- lost: the reaper, and a restarted worker reclaiming its runs --------------------------------------------

LOST_ERROR = "The worker stopped sending heartbeats (it was stopped or lost its connection)."
RECLAIMED_ERROR = "The worker restarted while the run trained (it was killed or crashed)."
CANCELLED_REASON = "It was cancelled."


def interruption_of(run: Run) -> str:
    """Why `run`'s attempt ended, as its next attempt's log says it: cancelled, or lost with its error and, when
    the reaper found it silent, for how long."""
    if run.status == Status.CANCELLED:
        return CANCELLED_REASON
    reason = run.error or "It was lost."
    if run.error == LOST_ERROR and run.heartbeat_at and run.finished_at:
        reason += f" No heartbeat for {(run.finished_at - run.heartbeat_at).total_seconds():.0f} s."
    return reason


def reap_lost_runs() -> int:
    """The lost-run reaper, a periodic chore (celery beat, tasks.reap_lost_runs): runs whose heartbeat went
    stale become lost (and resume by themselves). Cheap when nothing is stale (one indexed query) and safe to
    run in several processes at once. Returns how many were lost. Pages write nothing: until the reaper comes,
    they show a silent run as lost (Run.not_responding)."""
    return mark_lost_runs()


def mark_lost_runs() -> int:
    """Running runs without a heartbeat for `HEARTBEAT_TIMEOUT` seconds become lost; returns how many."""
    candidates = Run.objects.filter(Run.silent()).values_list("pk", "attempts", "heartbeat_at")
    # lost only if its heartbeat is still the stale one read here: a condition on the row's own columns, since one
    # through a join (silent() reads the experiment) makes Django's UPDATE a subquery that PostgreSQL does not
    # check again after a concurrent reaper's update, and two reapers would both lose (and resume) the run
    return sum(lose(run_id, attempt, LOST_ERROR, Q(heartbeat_at=beat) if beat else Q(heartbeat_at__isnull=True))
               for run_id, attempt, beat in candidates)


def reclaim(worker: str, started_before) -> int:
    """At a worker's start: the runs that its earlier incarnation (same node name and host) held, claimed
    before `started_before`, become lost at once (and resume by themselves). Returns how many."""
    held = Run.objects.filter(status=Status.RUNNING, worker_node=worker, worker_host=socket.gethostname()[:200],
                              started_at__lt=started_before).values_list("pk", "attempts")
    return sum(lose(run_id, attempt, RECLAIMED_ERROR) for run_id, attempt in held)


def lose(run_id: int, attempt: int, error: str, condition: Q = Q()) -> bool:
    """Mark one attempt of a running run lost, then resume it when its experiment says so, in one transaction
    (a page never sees `lost` in between); False when it is not running that attempt any more. A run that stays
    lost (or ends failed, out of resumes) is announced (`run_ended`). `condition` names the row's own columns only
    (no join): a joined one would not be checked again after a concurrent update on PostgreSQL."""
    with transaction.atomic():
        if not Run.objects.filter(condition, pk=run_id, status=Status.RUNNING, attempts=attempt).update(
                status=Status.LOST, finished_at=timezone.now(), error=error):
            return False
        logger.warning("run %s: lost (%s)", run_id, error)
        resume_lost(Run.objects.select_related("experiment").get(pk=run_id))
    announce_end(run_id)
    return True


def resume_lost(run: Run) -> None:
    """A lost run resumes by itself when its experiment has `auto_resume`, up to `max_auto_resumes` times;
    then it ends failed with its error, so a run that kills its worker every time does not loop."""
    experiment = run.experiment
    if not experiment.auto_resume:
        return
    if run.auto_resumes >= experiment.max_auto_resumes:
        Run.objects.filter(pk=run.pk, status=Status.LOST).update(
            status=Status.FAILED,
            error=f"{run.error} It was resumed by itself {run.auto_resumes} times, the experiment's limit.")
        return
    resume(run, automatic=True)


# --- resume -------------------------------------------------------------------------------------------------

def resume(run: Run, automatic: bool = False) -> bool:
    """Queue a cancelled or lost run to go on from its latest checkpoint; False when it is not resumable (or its
    experiment was just deleted). What it reported after that checkpoint is forgotten at once (and again
    when a worker claims it), so a page opened while it waits draws the history the next attempt goes on from.
    The interrupted attempt's time joins `earlier_attempts_seconds` here, while its end is known: the row then
    has no current attempt (`started_at` empty) until a worker claims the next one.
    The experiment's row is locked first, so a delete at the same moment either sees this run queued and
    refuses, or deletes first and this finds nothing to resume."""
    with transaction.atomic():
        if not Experiment.objects.select_for_update().filter(pk=run.experiment_id).exists():
            return False
        interrupted = Run.objects.filter(pk=run.pk, status__in=Run.RESUMABLE).first()
        if interrupted is None:
            return False
        resumed = Run.objects.filter(  # unchanged since it was read: its attempt is counted once
            pk=run.pk, status=interrupted.status, started_at=interrupted.started_at).update(
            status=Status.QUEUED, resume_requested=True, stop_requested=False, task_id="", send_failed=False,
            dispatched_at=None,
            started_at=None, finished_at=None, error="", traceback="", interruption=interruption_of(interrupted),
            earlier_attempts_seconds=interrupted.earlier_attempts_seconds + interrupted.attempt_seconds,
            auto_resumes=F("auto_resumes") + 1 if automatic else 0)
        if not resumed:
            return False
        run.refresh_from_db()
        forget_dead_attempt(run, run.latest_checkpoint())
        try:  # the stop flag of the cancel it comes back from, and the old stream (the dead attempt's events)
            redis_keys.redis_client().delete(redis_keys.stop_key(run.pk), redis_keys.stream_key(run.pk))
        except redis.RedisError as error:
            logger.warning("run %s: cannot clear its stop flag and stream (%s)", run.pk, error)
        enqueue(run)
    return True


def resume_refusal(run: Run) -> str | None:
    """Why its owner may not resume `run` now (None: they may): their storage is full, or its experiment asks for
    more than the site allows today (bounds that came after it was launched: intervals, the work per step). Said
    before it is queued, rather than the worker failing it. A lost run that resumes by itself is not held to this:
    it keeps its best and final checkpoints at the storage limit, as a running run does."""
    experiment = run.experiment
    full = storage_use.full_message(experiment.owner)
    if full:
        return full
    errors = interval_errors(run.total_steps, experiment.checkpoint_interval, experiment.video_interval)
    try:
        trainer.validate(experiment.algorithm, experiment.env_id, experiment.hyperparameters)
    except trainer.ConfigError as error:
        errors.update(error.errors)
    if not errors:
        return None
    listed = "; ".join(f"{name}: {message}" for name, message in errors.items())
    return (f"This run asks for more than this site allows now ({listed}). Clone its experiment, change those "
            "settings and launch the clone.")


# --- cancel -------------------------------------------------------------------------------------------------

def cancel(run: Run) -> str:
    """Cancel a run: "cancelled" when it had not started (it ends at once), "stopping" when it runs (it saves a
    final checkpoint and ends cancelled), "ended" when it had already ended (`run.status` says how).
    The database flag is set first, whatever the state, so a cancel pressed while a worker claims the run is
    never lost: the claim refuses a flagged run, and a running one reads the flag at its next heartbeat.
    Redis (the stop key the runner polls twice a second, and revoking the queued message) is best effort."""
    if not Run.objects.filter(pk=run.pk, status__in=Run.ACTIVE).update(stop_requested=True):
        run.refresh_from_db(fields=["status"])
        return "ended"
    if Run.objects.filter(pk=run.pk, status=Status.QUEUED).update(status=Status.CANCELLED,
                                                                    finished_at=timezone.now()):
        revoke(run.task_id)
        announce_end(run.pk)
        return Status.CANCELLED
    run.refresh_from_db(fields=["status"])
    if run.status != Status.RUNNING:  # a claim found the flag and cancelled it, or it has just ended
        return Status.CANCELLED if run.status == Status.CANCELLED else "ended"
    try:
        redis_keys.request_stop(run.pk)
    except redis.RedisError as error:
        logger.warning("run %s: cannot set the stop key (%s); the heartbeat passes the cancel on", run.pk, error)
    return "stopping"


def revoke(task_id: str) -> None:
    """Tell workers to drop a queued task without terminating anything (the claim would skip it anyway)."""
    try:
        app.control.revoke(task_id)
    except Exception as error:  # the broker may be down; the run is already marked cancelled
        logger.warning("cannot revoke task %s: %s", task_id, error)


# --- delete -------------------------------------------------------------------------------------------------

def delete_experiment(experiment: Experiment) -> int:
    """Delete an experiment with its runs, events, checkpoint and video files; refused (returns how many runs
    are queued or running) while a run is active, checked under the experiment's row lock that `resume` takes
    too. A worker would otherwise go on writing files for a deleted run. Returns 0 once deleted."""
    with transaction.atomic():
        if not Experiment.objects.select_for_update().filter(pk=experiment.pk).exists():
            return 0
        active = Run.objects.filter(experiment_id=experiment.pk, status__in=Run.ACTIVE).count()
        if active:
            return active
        run_ids = list(Run.objects.filter(experiment_id=experiment.pk).values_list("pk", flat=True))
        experiment.delete()  # checkpoints and videos take their files with them (models.py signals)
    forget_streams(run_ids)
    return 0


def forget_streams(run_ids: list[int]) -> None:
    """Drop the live streams of deleted runs now rather than when they expire."""
    if not run_ids:
        return
    try:
        redis_keys.redis_client().delete(*(redis_keys.stream_key(run_id) for run_id in run_ids))
    except redis.RedisError as error:
        logger.warning("cannot delete the streams of runs %s: %s", run_ids, error)
