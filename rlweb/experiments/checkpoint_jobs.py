"""Small jobs on a checkpoint, asked for from the run page: evaluate the saved policy for N episodes, or
record a video of one episode (rlib's `test()` and `save_videos()` in the source documents).

    ask ──> queued ──claim──> running ──> succeeded | failed | cancelled
              └──── cancel ──> cancelled

A job goes to the `jobs` queue (settings.JOBS_QUEUE), which a worker of its own serves (`make run` and
docker-compose start one), so it never waits behind a training run; it loads the checkpoint on whatever device
that worker has. Where no live worker serves `jobs`, it goes to the run's own queue, as before: a worker with the
run's device does it, after the run it may be training. The claim is one conditional UPDATE: a second delivery does nothing. A job whose worker died
fails after `STALE_AFTER` (a periodic chore); a job that cannot be sent fails at once, saying so. A job's end waits
out a database outage of up to `FINISH_PATIENCE_SECONDS` (`finish`).
Cancel, as for runs: a queued job ends `cancelled` at once and its message is revoked (the claim would skip
it anyway); a running one gets a flag in its row that its worker reads between steps, every
`STOP_POLL_SECONDS`, and it ends `cancelled` without a result.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import redis
from django import forms
from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as QueueUnreachable

from rlweb.celery import app
from rlweb.experiments import workers
from rlweb.experiments.files import save_with_file
from rlweb.experiments.lifecycle import revoke
from rlweb.experiments.models import Checkpoint, CheckpointJob, Video

logger = logging.getLogger(__name__)

JOB_TASK = "rlweb.checkpoint_job"  # tasks.checkpoint_job; sent by name, as lifecycle sends the training task
MAX_EPISODES = 100
MAX_UNFINISHED_PER_RUN = 3  # a run page cannot fill its queue with jobs
MAX_SECONDS = 30 * 60  # a job never holds its worker (and the runs queued behind it) longer than this
STALE_AFTER = timedelta(hours=1)  # a running job this old lost its worker
STOP_POLL_SECONDS = 0.25  # how often a running job reads its cancel flag
FINISH_PATIENCE_SECONDS = 120.0  # how long a job's end waits for a database that does not answer (finish)
Status = CheckpointJob.Status


class CheckpointJobForm(forms.Form):
    """What the run page's "Act on a checkpoint" form asks: which checkpoint of this run, what to do, how long."""

    checkpoint = forms.ModelChoiceField(queryset=Checkpoint.objects.none(), empty_label=None, error_messages={
        "invalid_choice": "Choose one of this run's checkpoints (a new best or final one replaces the one before: "
                          "the list shows it now)."})
    kind = forms.ChoiceField(choices=[(CheckpointJob.Kind.EVALUATE, "Evaluate"),
                                      (CheckpointJob.Kind.VIDEO, "Record a video of one episode")])
    episodes = forms.IntegerField(min_value=1, max_value=MAX_EPISODES, initial=10, required=False,
                                  help_text=f"evaluation episodes, 1 to {MAX_EPISODES}")

    def __init__(self, run, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run = run
        self.fields["checkpoint"].queryset = run.current_checkpoints().order_by("-step", "-id")
        self.fields["checkpoint"].label_from_instance = lambda checkpoint: f"{checkpoint.tag}, step {checkpoint.step}"

    def clean(self):
        data = super().clean()
        if data.get("kind") == CheckpointJob.Kind.EVALUATE and not data.get("episodes") and "episodes" not in self.errors:
            self.add_error("episodes", f"How many episodes: 1 to {MAX_EPISODES}.")
        if unfinished(self.run) >= MAX_UNFINISHED_PER_RUN:
            raise forms.ValidationError(f"This run has {MAX_UNFINISHED_PER_RUN} jobs waiting or running already: "
                                        "ask again once one is done.")
        return data


def unfinished(run) -> int:
    return CheckpointJob.objects.filter(checkpoint__run=run, status__in=[Status.QUEUED, Status.RUNNING]).count()


def ask(checkpoint: Checkpoint, kind: str, episodes: int) -> CheckpointJob:
    """A new job on `checkpoint`, sent to its run's queue once the surrounding transaction commits."""
    queue = job_queue(checkpoint.run.experiment)
    job = CheckpointJob.objects.create(checkpoint=checkpoint, kind=kind, queue=queue,
                                       episodes=episodes if kind == CheckpointJob.Kind.EVALUATE else 1)
    transaction.on_commit(lambda: send(job.pk, queue))
    return job


def job_queue(experiment) -> str:
    """The jobs queue where a jobs worker is deployed or live, else the run's own queue."""
    return workers.jobs_queue_or(experiment.queue_name)


def task_id(job_id: int) -> str:
    """The job's Celery task id: one per job, known without storing it, so a cancel can revoke the message."""
    return f"checkpoint-job-{job_id}"


def send(job_id: int, queue: str) -> bool:
    try:
        app.send_task(JOB_TASK, args=[job_id], queue=queue, task_id=task_id(job_id))
    except (redis.RedisError, QueueUnreachable, OSError) as error:
        logger.warning("checkpoint job %s: cannot reach the task queue (%s)", job_id, error)
        finish(job_id, Status.FAILED, patience=0,  # in a web request: one try, no waits
               error=f"The task queue cannot be reached ({error}): ask again later.")
        return False
    return True


def do(job_id: int, worker: str = "", queue: str = "") -> str:
    """The worker's side: claim the job, do it, record the result (`queue`: the one it came on). Returns the job's
    status."""
    claimed = CheckpointJob.objects.filter(pk=job_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started_at=timezone.now(), worker_node=worker)
    if not claimed:
        logger.info("checkpoint job %s is not queued any more: skipping", job_id)
        return "skipped"
    job = CheckpointJob.objects.select_related("checkpoint__run__experiment").get(pk=job_id)
    stop = StopCheck(job_id, deadline=time.monotonic() + MAX_SECONDS)
    try:
        agent = job.checkpoint.load_agent(device=job_device(job.checkpoint.run.experiment, queue))
        if job.kind == CheckpointJob.Kind.EVALUATE:
            result = agent.evaluate(episodes=job.episodes, should_stop=stop)
            if result is None:
                return stopped(job_id, stop, f"It took longer than {MAX_SECONDS // 60} minutes and was stopped: "
                                             "ask for fewer episodes.")
            return finish(job_id, Status.SUCCEEDED, result={key: result[key] for key in
                                                            ("mean", "std", "length_mean", "returns")})
        video, result = record_video(job, agent, stop)
        if video is None:
            return stopped(job_id, stop, f"The episode took longer than {MAX_SECONDS // 60} minutes and was stopped.")
        return finish(job_id, Status.SUCCEEDED, video=video, result=result)
    except Exception as error:  # anything the checkpoint, the env or the storage raises ends the job, said plainly
        logger.exception("checkpoint job %s failed", job_id)
        return finish(job_id, Status.FAILED, error=f"{type(error).__name__}: {error}")


class StopCheck:
    """The `should_stop` of a running job, asked between env steps: true once its time is up, or once a cancel
    set its flag (read from the database at most every `STOP_POLL_SECONDS`, and at the first step)."""

    def __init__(self, job_id: int, deadline: float):
        self.job_id = job_id
        self.deadline = deadline
        self.cancelled = False
        self.read_at = -math.inf

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.read_at >= STOP_POLL_SECONDS:
            self.read_at = now
            self.cancelled = CheckpointJob.objects.filter(pk=self.job_id, stop_requested=True).exists()
        return self.cancelled or now > self.deadline


def stopped(job_id: int, stop: StopCheck, too_long: str) -> str:
    """The end of a job that `stop` interrupted: cancelled, or failed for taking too long."""
    if stop.cancelled:
        return finish(job_id, Status.CANCELLED)
    return finish(job_id, Status.FAILED, error=too_long)


def cancel(job: CheckpointJob) -> str:
    """Cancel a job: "cancelled" when it had not started (its message is revoked), "stopping" when it runs (its
    worker stops it within `STOP_POLL_SECONDS` of its next step and it ends cancelled), "ended" when it had
    already ended (`job.status` says how). A claim that comes between the two updates finds a running job
    that the second one flags."""
    if CheckpointJob.objects.filter(pk=job.pk, status=Status.QUEUED).update(status=Status.CANCELLED,
                                                                            finished_at=timezone.now()):
        revoke(task_id(job.pk))
        return Status.CANCELLED
    if CheckpointJob.objects.filter(pk=job.pk, status=Status.RUNNING).update(stop_requested=True):
        return "stopping"
    job.refresh_from_db(fields=["status"])
    return "ended"


def job_device(experiment, queue: str) -> str:
    """The run's own device when the job came on its run's queue; whatever the worker has when it came on the jobs
    queue (a GPU run's checkpoint is evaluated on the CPU there when that worker has no GPU)."""
    return "auto" if queue == settings.JOBS_QUEUE else experiment.torch_device


def record_video(job: CheckpointJob, agent, should_stop) -> tuple[Video | None, dict]:
    """One greedy episode of the checkpoint's policy as an mp4 in storage, shown with the run's videos (None
    when `should_stop` interrupted it)."""
    from trainer.video import record_episode, video_env

    env = video_env(agent.env_id)  # CannotRender says why an environment has no pictures
    try:
        with tempfile.TemporaryDirectory(prefix="rlweb-job-") as folder:
            recorded = record_episode(agent, env, Path(folder) / "episode.mp4", seed=agent.seed + 3_000_017,
                                      should_stop=should_stop)
            if recorded is None:
                return None, {}
            checkpoint = job.checkpoint
            video = Video(run=checkpoint.run, step=checkpoint.step, episode_return=recorded["episode_return"])
            save_with_file(video, recorded["path"], f"checkpoint_{checkpoint.pk}_job_{job.pk}.mp4")
    finally:
        env.close()
    return video, {"episode_return": recorded["episode_return"], "length": recorded["length"]}


def finish(job_id: int, status: str, patience: float = FINISH_PATIENCE_SECONDS, **fields) -> str:
    """Record the job's end. Where the database does not answer (a restart, a lock), it tries again, with waits of
    1 s growing to 8 s, for `patience` seconds: else the job would show running until `fail_stale`, an hour on."""
    started, wait = time.monotonic(), 1.0
    while True:
        try:
            CheckpointJob.objects.filter(pk=job_id).update(status=status, finished_at=timezone.now(), **fields)
            return status
        except DatabaseError as error:
            close_old_connections()  # a broken connection is replaced at the next try
            if time.monotonic() - started + wait > patience:
                logger.exception("checkpoint job %s: cannot record its end (%s) for %.0f s; fail_stale will",
                                 job_id, status, time.monotonic() - started)
                return status
            logger.warning("checkpoint job %s: cannot record its end (%s) yet: %s", job_id, status, error)
        time.sleep(wait)
        wait = min(2 * wait, 8.0)


def fail_stale() -> int:
    """Running jobs whose worker has not finished them in `STALE_AFTER` fail (a periodic chore, tasks.py); returns
    how many."""
    return CheckpointJob.objects.filter(status=Status.RUNNING, started_at__lt=timezone.now() - STALE_AFTER).update(
        status=Status.FAILED, finished_at=timezone.now(),
        error=f"The worker did not finish it within {STALE_AFTER.total_seconds() / 60:.0f} minutes: ask again.")
