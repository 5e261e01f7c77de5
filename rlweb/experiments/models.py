"""Experiments, their runs (one per seed), the events each run reported, and its checkpoints.

`Run` holds the truth about a run (state, heartbeat, final metrics); Redis only carries the live stream.
"""

import tempfile
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone


class Experiment(models.Model):
    class Device(models.TextChoices):
        AUTO = "auto", "auto"
        CPU = "cpu", "CPU"
        CUDA = "cuda", "CUDA"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=200)
    algorithm = models.CharField(max_length=50)
    env_id = models.CharField("environment id", max_length=200)
    hyperparameters = models.JSONField(default=dict, help_text="Parsed values, as trainer.validate returned them.")
    total_steps = models.PositiveBigIntegerField()
    eval_interval = models.PositiveIntegerField(default=0, help_text="Env steps between evaluations (0: off).")
    eval_episodes = models.PositiveIntegerField(default=5)
    checkpoint_interval = models.PositiveIntegerField(default=0, help_text="Env steps between checkpoints (0: off).")
    video_interval = models.PositiveIntegerField(default=0, help_text="Env steps between recorded episodes (0: off).")
    description = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True, help_text="Short labels, for filtering.")
    num_seeds = models.PositiveSmallIntegerField(default=1)
    device = models.CharField(max_length=10, choices=Device.choices, default=Device.AUTO)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("experiment-detail", args=[self.pk])

    @property
    def queue_name(self) -> str:
        """The Celery queue its runs go to: workers listen on the queue of the device they have."""
        if self.device == self.Device.CUDA:
            return "gpu"
        if self.device == self.Device.AUTO:
            return settings.AUTO_QUEUE
        return "cpu"

    def launch(self) -> list["Run"]:
        """One run per seed, each queued once the surrounding transaction commits."""
        from rlweb.experiments.tasks import enqueue

        runs = [Run.objects.create(experiment=self, seed=seed, total_steps=self.total_steps)
                for seed in range(self.num_seeds)]
        for run in runs:
            enqueue(run)
        return runs


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        LOST = "lost"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.LOST)
    ACTIVE = (Status.QUEUED, Status.RUNNING)
    RESUMABLE = (Status.CANCELLED, Status.LOST)

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    seed = models.IntegerField(default=0)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    steps_done = models.PositiveBigIntegerField(default=0)
    total_steps = models.PositiveBigIntegerField()
    start_step = models.PositiveBigIntegerField(
        default=0, help_text="Env steps already done when this attempt started (a resumed run's checkpoint step).")
    resume_requested = models.BooleanField(
        default=False, help_text="Queued to go on from its last checkpoint rather than from scratch.")
    task_id = models.CharField(max_length=64, blank=True)
    worker_host = models.CharField(max_length=200, blank=True)
    device_used = models.CharField(max_length=50, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    first_started_at = models.DateTimeField(
        null=True, blank=True, help_text="When a worker first claimed the run; a resume keeps it.")
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the current attempt was claimed.")
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Attempts claimed by a worker: 1 at the first start, one more per resume.")
    earlier_attempts_seconds = models.FloatField(
        default=0.0, help_text="Seconds trained by the attempts before the current one.")
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    eval_return_mean = models.FloatField(null=True, blank=True)
    eval_return_std = models.FloatField(null=True, blank=True)
    best_eval_return = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["experiment_id", "seed", "id"]

    def __str__(self):
        return f"{self.experiment} / seed {self.seed}"

    def get_absolute_url(self):
        return reverse("run-detail", args=[self.pk])

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def progress_percent(self) -> float:
        return round(100 * min(self.steps_done, self.total_steps) / max(1, self.total_steps), 1)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def is_resumable(self) -> bool:
        return self.status in self.RESUMABLE

    @property
    def attempt_seconds(self) -> float:
        """Seconds the current attempt has trained: from its claim to its end, or to now while it runs; 0
        before a worker claims it. A lost run ended at its last heartbeat (the sweep notices much later)."""
        end = self.heartbeat_at if self.status == self.Status.LOST and self.heartbeat_at else self.finished_at
        if not self.started_at or (end is None and self.is_finished):
            return 0.0
        return max(0.0, ((end or timezone.now()) - self.started_at).total_seconds())

    @property
    def training_seconds(self) -> float | None:
        """Seconds the run has trained over all its attempts; None when it never started."""
        if not self.started_at and not self.first_started_at:
            return None
        return self.earlier_attempts_seconds + self.attempt_seconds

    @property
    def seconds_left(self) -> float | None:
        """Time left of a running run, at the speed of its current attempt so far (None: no estimate yet)."""
        done = self.steps_done - self.start_step
        if self.status != self.Status.RUNNING or not self.started_at or done <= 0:
            return None
        elapsed = (timezone.now() - self.started_at).total_seconds()
        return max(0.0, (self.total_steps - self.steps_done) * elapsed / done)

    @classmethod
    def claim(cls, run_id: int, worker_host: str) -> "Run | None":
        """Move a queued run to running and return it; None when another delivery got it first."""
        now = timezone.now()
        with transaction.atomic():
            claimed = cls.objects.filter(pk=run_id, status=cls.Status.QUEUED, resume_requested=False).update(
                status=cls.Status.RUNNING, worker_host=worker_host[:200], first_started_at=now, started_at=now,
                heartbeat_at=now, attempts=1, earlier_attempts_seconds=0.0, steps_done=0, start_step=0, error="",
                traceback="")
            if not claimed:
                return None
            run = cls.objects.select_related("experiment").get(pk=run_id)
            run.forget_after(None)  # a run is claimed once, but clear anything a half-finished attempt left
        return run

    def request_resume(self) -> bool:
        """Queue a cancelled or lost run to go on from its last checkpoint; False when it is not resumable.
        What it reported after that checkpoint is forgotten at once (and again when a worker claims it), so
        a page opened while it waits for a worker draws the history the next attempt goes on from.
        The interrupted attempt's time joins `earlier_attempts_seconds` here, while its end is known: the
        row then has no current attempt (`started_at` empty) until a worker claims the next one."""
        with transaction.atomic():
            interrupted = Run.objects.filter(pk=self.pk, status__in=self.RESUMABLE).first()
            if interrupted is None:
                return False
            resumed = Run.objects.filter(  # unchanged since it was read: its attempt is counted once
                pk=self.pk, status=interrupted.status, started_at=interrupted.started_at).update(
                status=self.Status.QUEUED, resume_requested=True, task_id="", started_at=None, finished_at=None,
                earlier_attempts_seconds=interrupted.earlier_attempts_seconds + interrupted.attempt_seconds, error="",
                traceback="")
            if resumed:
                self.refresh_from_db()
                self.forget_after(self.latest_checkpoint())
        return bool(resumed)

    def latest_checkpoint(self) -> "Checkpoint | None":
        return self.checkpoints.order_by("-step", "-id").first()

    @classmethod
    def claim_resume(cls, run_id: int, worker_host: str) -> "tuple[Run, Checkpoint | None] | None":
        """Move a run queued for resuming to running: it goes on from its latest checkpoint, and whatever the
        interrupted attempt reported after that checkpoint is forgotten. None when another delivery got it.
        A new attempt starts (its time is counted from now); the run's first start stays."""
        now = timezone.now()
        with transaction.atomic():
            claimed = cls.objects.filter(pk=run_id, status=cls.Status.QUEUED, resume_requested=True).update(
                status=cls.Status.RUNNING, resume_requested=False, worker_host=worker_host[:200],
                first_started_at=Coalesce("first_started_at", Value(now)), started_at=now, attempts=F("attempts") + 1,
                heartbeat_at=now, finished_at=None, error="", traceback="")
            if not claimed:
                return None
            run = cls.objects.select_related("experiment").get(pk=run_id)
            checkpoint = run.latest_checkpoint()
            run.forget_after(checkpoint)  # again: a lost run's worker may have gone on reporting
        return run, checkpoint

    def forget_after(self, checkpoint: "Checkpoint | None") -> None:
        """Delete the events, checkpoints and videos that came after `checkpoint` (everything without one),
        so the next attempt's events follow on with no step reported twice or left out; the charts' summary
        of the metrics is rebuilt from what is kept when it held any of them."""
        from rlweb.experiments.history import rebuild_summary  # history reads these models

        events, checkpoints, videos = Event.objects.filter(run=self), self.checkpoints.all(), self.videos.all()
        step = kept_seq = 0
        if checkpoint is not None:
            step = checkpoint.step
            marker = (checkpoint.reported_event()
                      or events.filter(step__lte=step).order_by("-seq").first())
            kept_seq = marker.seq if marker else 0
            events = events.filter(seq__gt=kept_seq)
            checkpoints, videos = checkpoints.filter(step__gt=step), videos.filter(step__gt=step)
        events.delete()
        checkpoints.delete()  # the post_delete signals below remove their files too
        videos.delete()
        if MetricBucket.objects.filter(run=self, last_seq__gt=kept_seq).exists():
            rebuild_summary(self.pk)
        self.steps_done = self.start_step = step
        Run.objects.filter(pk=self.pk).update(steps_done=step, start_step=step)

    def record_device(self, device: str) -> None:
        self.device_used = device[:50]
        Run.objects.filter(pk=self.pk).update(device_used=self.device_used)

    def mark_finished(self, summary: dict) -> None:
        """Store the runner's summary: succeeded or cancelled, with the final evaluation. The best return of
        a resumed run is the best of all its attempts."""
        self.status = self.Status.CANCELLED if summary.get("status") == "cancelled" else self.Status.SUCCEEDED
        self.steps_done = int(summary.get("steps") or self.steps_done)
        if summary.get("eval_return_mean") is not None or not self.start_step:
            self.eval_return_mean = summary.get("eval_return_mean")
            self.eval_return_std = summary.get("eval_return_std")
        best = summary.get("best_eval_return")
        if self.start_step and self.best_eval_return is not None:
            best = self.best_eval_return if best is None else max(best, self.best_eval_return)
        self.best_eval_return = best
        self.finished_at = self.heartbeat_at = timezone.now()
        self.save(update_fields=["status", "steps_done", "eval_return_mean", "eval_return_std",
                                 "best_eval_return", "finished_at", "heartbeat_at"])

    def mark_failed(self, error: str, traceback: str = "") -> None:
        self.status = self.Status.FAILED
        self.error = error
        self.traceback = traceback
        self.finished_at = timezone.now()
        self.save(update_fields=["status", "error", "traceback", "finished_at"])

    def cancel_queued(self) -> bool:
        """Cancel a run that no worker has claimed yet; False when it is no longer queued."""
        return bool(Run.objects.filter(pk=self.pk, status=self.Status.QUEUED).update(
            status=self.Status.CANCELLED, finished_at=timezone.now()))

    @classmethod
    def mark_lost_runs(cls) -> int:
        """Runs whose worker stopped sending heartbeats become `lost`; returns how many."""
        stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT)
        return cls.objects.filter(Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True),
                                  status=cls.Status.RUNNING).update(
            status=cls.Status.LOST, finished_at=timezone.now(),
            error="The worker stopped sending heartbeats (it was stopped or lost its connection).")


class Event(models.Model):
    """One event a run reported (trainer/events.py); `seq` numbers them per run, as the live stream does."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=20)
    step = models.BigIntegerField()
    time = models.FloatField()
    values = models.JSONField(default=dict)

    class Meta:
        ordering = ["run_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_event_seq_per_run")]
        indexes = [models.Index(fields=["run", "kind", "seq"])]

    def __str__(self):
        return f"{self.run_id}#{self.seq} {self.kind}"

    def as_dict(self) -> dict:
        return {"seq": self.seq, "kind": self.kind, "step": self.step, "time": self.time, "values": self.values}


def checkpoint_path(checkpoint: "Checkpoint", filename: str) -> str:
    return f"checkpoints/run_{checkpoint.run_id}/{filename}"


class Checkpoint(models.Model):
    class Tag(models.TextChoices):
        PERIODIC = "periodic"
        BEST = "best"
        FINAL = "final"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    tag = models.CharField(max_length=20, choices=Tag.choices)
    step = models.PositiveBigIntegerField()
    file = models.FileField(upload_to=checkpoint_path, max_length=500)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "step", "id"]

    def __str__(self):
        return f"{self.run} {self.tag} @ {self.step}"

    def get_absolute_url(self):
        return reverse("checkpoint-download", args=[self.pk])

    @property
    def download_name(self) -> str:
        if self.tag == self.Tag.PERIODIC:
            return f"run{self.run_id}-step{self.step}.zip"
        return f"run{self.run_id}-{self.tag}.zip"

    def reported_event(self) -> "Event | None":
        """The `checkpoint` event the run reported when it saved this checkpoint."""
        return Event.objects.filter(run_id=self.run_id, kind="checkpoint", values__checkpoint_id=self.pk).first()

    def load_agent(self, device: str = "cpu"):
        """The agent saved in this checkpoint, copied out of storage (trainer reads local files; a
        checkpoint holds no pickle, so loading runs no code from the file)."""
        import trainer

        with tempfile.TemporaryDirectory(prefix="rlweb-checkpoint-") as folder:
            path = Path(folder) / "checkpoint.zip"
            with self.file.open("rb") as source:
                path.write_bytes(source.read())
            return trainer.load(path, device=device)


def video_path(video: "Video", filename: str) -> str:
    return f"videos/run_{video.run_id}/{filename}"


class Video(models.Model):
    """An evaluation episode the runner recorded as an H.264 mp4."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="videos")
    step = models.PositiveBigIntegerField()
    episode_return = models.FloatField(null=True, blank=True)
    file = models.FileField(upload_to=video_path, max_length=500)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "-step", "-id"]

    def __str__(self):
        return f"{self.run} video @ {self.step}"


class MetricBucket(models.Model):
    """A run's metric, downsampled for drawing (history.py): bucket `index` of `key` summarises `count`
    consecutive values (at most `width`) by its smallest and largest points, and the band of a mean
    (mean ± std) by its lowest and highest edge."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_buckets")
    key = models.CharField(max_length=200)
    index = models.PositiveIntegerField()
    width = models.PositiveIntegerField()
    count = models.PositiveIntegerField()
    last_seq = models.PositiveBigIntegerField(help_text="The last event folded in.")
    points = models.JSONField(help_text="[[seq, step, time, value]] of the smallest and the largest value.")
    band = models.JSONField(null=True, blank=True, help_text="[lowest mean - std, highest mean + std].")

    class Meta:
        ordering = ["run_id", "key", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "key", "index"], name="unique_metric_bucket")]

    def __str__(self):
        return f"{self.run_id} {self.key}[{self.index}]"


@receiver(post_delete, sender=Video)
def delete_video_file(sender, instance: Video, **kwargs):
    instance.file.delete(save=False)


@receiver(post_delete, sender=Checkpoint)
def delete_checkpoint_file(sender, instance: Checkpoint, **kwargs):
    """The row and its file go together, also when a run or an experiment is deleted."""
    instance.file.delete(save=False)
