"""Experiments, their runs (one per seed), the events each run reported, and its checkpoints.

`Run` holds the truth about a run (state, heartbeat, final metrics); Redis only carries the live stream.
The models hold fields and small queries; every change of a run's status is in lifecycle.py.
"""

import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone


LOGGED = "logged"  # the algorithm of an experiment whose runs a user's own script logs through the API (rlweb/logged)


class Experiment(models.Model):
    class Device(models.TextChoices):
        AUTO = "auto", "auto"
        CPU = "cpu", "CPU"
        CUDA = "cuda", "CUDA"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="experiments")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="experiments", help_text="Shared with its members; none: private.")
    name = models.CharField(max_length=200)
    algorithm = models.CharField(max_length=50)
    env_id = models.CharField("environment id", max_length=200)
    hyperparameters = models.JSONField(default=dict, help_text="Parsed values, as trainer.validate returned them.")
    preset = models.CharField(max_length=100, blank=True,
                              help_text="The preset its hyperparameters started from (trainer/presets.py), such as "
                                        "zoo:Acrobot-v1; empty: the algorithm's own defaults.")
    total_steps = models.PositiveBigIntegerField()
    eval_interval = models.PositiveIntegerField(default=0, help_text="Env steps between evaluations (0: off).")
    eval_episodes = models.PositiveIntegerField(default=5)
    checkpoint_interval = models.PositiveIntegerField(default=0, help_text="Env steps between checkpoints (0: off).")
    video_interval = models.PositiveIntegerField(default=0, help_text="Env steps between recorded episodes (0: off).")
    keep_checkpoints = models.PositiveIntegerField(
        default=20, help_text="Periodic checkpoints kept per run, the latest ones (0: all); its best and final ones "
                              "are always kept. Experiments made before this field keep all.")
    description = models.TextField(blank=True)
    notes = models.TextField(blank=True, help_text="Its owner's markdown notes, written on its page (notes.py).")
    tags = models.JSONField(default=list, blank=True, help_text="Short labels, for filtering.")
    num_seeds = models.PositiveSmallIntegerField(default=1)
    device = models.CharField(max_length=60, default=Device.AUTO,
                              help_text="auto, cpu, cuda, or a named queue the admin declares (settings.NAMED_QUEUES).")
    auto_resume = models.BooleanField(
        default=True, help_text="A run whose worker died goes on by itself from its latest checkpoint.")
    max_auto_resumes = models.PositiveSmallIntegerField(
        default=3, help_text="How many times a run is resumed by itself before it ends failed.")
    submission_token = models.CharField(
        max_length=64, blank=True, help_text="The form's one-time token: the same form posted twice makes one experiment.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "submission_token"], condition=~Q(submission_token=""),
                                               name="unique_submission_per_owner")]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("experiment-detail", args=[self.pk])

    @property
    def is_logged(self) -> bool:
        """Its runs are logged from the user's own script through the API (rlweb/logged), not trained here: nothing
        here can clone, resume, change or evaluate them."""
        return self.algorithm == LOGGED

    @property
    def queue_name(self) -> str:
        """The Celery queue its runs go to: workers listen on the queue of the device they have."""
        return queue_of_device(self.device)

    @property
    def torch_device(self) -> str:
        """The device the run asks torch for: a named queue's runs take what their worker has."""
        return self.device if self.device in self.Device.values else self.Device.AUTO


def queue_of_device(device: str) -> str:
    """cuda: gpu; auto: settings.AUTO_QUEUE; cpu: cpu; any other value is a named queue."""
    return {"cuda": "gpu", "auto": settings.AUTO_QUEUE, "cpu": "cpu"}.get(device, device)


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        LOST = "lost"
        PRUNED = "pruned"  # a sweep's trial that its pruner stopped early (rlweb/sweeps)

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.LOST, Status.PRUNED)
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
    stop_requested = models.BooleanField(
        default=False, help_text="Cancel was pressed: the worker stops the run at its next check (the truth; "
                                 "the Redis stop key is only the fast path).")
    task_id = models.CharField(max_length=64, blank=True)
    send_failed = models.BooleanField(
        default=False,
        help_text="Queued, but the task queue (Redis) could not be reached: the lost-run reaper sends it again.")
    dispatched_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the scheduler sent this queued attempt to a free worker (scheduler.py); None: it waits.")
    worker_host = models.CharField(max_length=200, blank=True)
    worker_node = models.CharField(
        max_length=200, blank=True, help_text="The Celery node name of the worker that claimed it (celery@host).")
    device_used = models.CharField(max_length=50, blank=True)
    environment = models.JSONField(
        default=dict, blank=True,
        help_text="What made its latest attempt (trainer/provenance.py): versions, commit, machine, repeat command.")
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
    auto_resumes = models.PositiveIntegerField(
        default=0, help_text="Times it was resumed by itself since it was last started or resumed by hand.")
    last_seq = models.PositiveBigIntegerField(
        default=0, help_text="The highest event seq any attempt may have sent: a resumed attempt numbers on after it.")
    forgotten_seqs = models.JSONField(
        default=list, blank=True, help_text="[[after, through], ...]: event seqs of interrupted attempts, forgotten "
                                            "at a resume. A page that saw one reloads the history.")
    live_changes = models.JSONField(
        default=list, blank=True,
        help_text="Hyperparameter changes asked for while it trained, in order: [{id, values, requested_at}, with "
                  "step, seq and changes ({name: {old, new}}) or error once its worker applied or refused it] "
                  "(live_changes.py).")
    notes = models.TextField(blank=True, help_text="Its owner's markdown notes, written on its page (notes.py).")
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    interruption = models.TextField(
        blank=True, help_text="Why the attempt it was last resumed from ended (lost: its error; or cancelled): the "
                              "next attempt's log says so (lifecycle.resumed_event).")
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

    @staticmethod
    def heartbeat_deadline(logged: bool = False) -> datetime:
        """A running run whose last heartbeat is older than this (`HEARTBEAT_TIMEOUT` seconds ago) went silent. A
        logged run's heartbeat is its script's last request (rlweb/logged): a script may log nothing for minutes
        (an evaluation, a checkpoint), so it goes silent after `LOGGED_RUN_SILENCE_SECONDS` instead."""
        seconds = settings.LOGGED_RUN_SILENCE_SECONDS if logged else settings.HEARTBEAT_TIMEOUT
        return timezone.now() - timedelta(seconds=seconds)

    @staticmethod
    def silent(prefix: str = "") -> Q:
        """Running runs whose worker has not beaten for `HEARTBEAT_TIMEOUT` seconds (or never; a logged run: whose
        script sent nothing for `LOGGED_RUN_SILENCE_SECONDS`, `heartbeat_deadline`): the lost-run reaper
        marks them lost (lifecycle.reap_lost_runs); until it does, pages show them lost. `prefix` names the relation
        from another model (`runs__`)."""
        logged = Q(**{f"{prefix}experiment__algorithm": LOGGED})
        return Q(**{f"{prefix}status": Run.Status.RUNNING}) & (
            Q(**{f"{prefix}heartbeat_at__isnull": True})
            | (~logged & Q(**{f"{prefix}heartbeat_at__lt": Run.heartbeat_deadline()}))
            | (logged & Q(**{f"{prefix}heartbeat_at__lt": Run.heartbeat_deadline(logged=True)})))

    @property
    def not_responding(self) -> bool:
        """Running, but its worker went silent (`silent`): computed when shown; the reaper writes `lost` later."""
        if self.status != self.Status.RUNNING or self.heartbeat_at is None:
            return self.status == self.Status.RUNNING
        # the experiment is read only for a run that looks silent: a list of runs costs no query per row
        return self.heartbeat_at < Run.heartbeat_deadline() and (
            not self.experiment.is_logged or self.heartbeat_at < Run.heartbeat_deadline(logged=True))

    @property
    def shown_status(self) -> str:
        """The status a page shows: `lost` for a run that is not responding, else its status."""
        return self.Status.LOST if self.not_responding else self.status

    @property
    def attempt_seconds(self) -> float:
        """Seconds the current attempt has trained: from its claim to its end, or to now while it runs; 0
        before a worker claims it. A lost run ended at its last heartbeat (the reaper notices later)."""
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
    def average_steps_per_second(self) -> float | None:
        """Env steps a second over the whole run (its steps done over its training seconds); None before any."""
        seconds = self.training_seconds
        return self.steps_done / seconds if seconds and self.steps_done else None

    @property
    def seconds_left(self) -> float | None:
        """Time left of a running run, at the speed of its current attempt so far (None: no estimate yet)."""
        done = self.steps_done - self.start_step
        if self.status != self.Status.RUNNING or not self.started_at or done <= 0:
            return None
        elapsed = (timezone.now() - self.started_at).total_seconds()
        return max(0.0, (self.total_steps - self.steps_done) * elapsed / done)

    @staticmethod
    def active_count(owner_id: int) -> int:
        """The user's queued and running runs that count toward settings.MAX_ACTIVE_RUNS_PER_USER: a script's logged
        runs use its own machine, not the workers, and do not."""
        return Run.objects.filter(experiment__owner_id=owner_id, status__in=Run.ACTIVE).exclude(
            experiment__algorithm=LOGGED).count()

    def latest_checkpoint(self) -> "Checkpoint | None":
        return self.current_checkpoints().order_by("-step", "-id").first()

    def current_checkpoints(self):
        """The checkpoints the run offers: periodic ones, and its one best and one final (not those replaced)."""
        return self.checkpoints.filter(replaced=False)

    def stored_seq(self) -> int:
        """The highest seq stored for the run (0: none)."""
        return Event.objects.filter(run=self).order_by("-seq").values_list("seq", flat=True).first() or 0


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
    size = models.PositiveBigIntegerField(default=0, help_text="Bytes of its file, set when it is stored (quotas).")
    created = models.DateTimeField(auto_now_add=True)
    # a best or final checkpoint that a newer one of its tag replaced, or a periodic one past the experiment's
    # `keep_checkpoints`, kept (with its file) only because jobs were asked on it: they still act on the policy they
    # were asked for, and the page lists it no more
    replaced = models.BooleanField(default=False)

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
            with self.file.storage.open(self.file.name, "rb") as source, path.open("wb") as copy:
                shutil.copyfileobj(source, copy)
            return trainer.load(path, device=device)


def video_path(video: "Video", filename: str) -> str:
    return f"videos/run_{video.run_id}/{filename}"


class Video(models.Model):
    """An evaluation episode the runner recorded as an H.264 mp4."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="videos")
    step = models.PositiveBigIntegerField()
    episode_return = models.FloatField(null=True, blank=True)
    file = models.FileField(upload_to=video_path, max_length=500)
    size = models.PositiveBigIntegerField(default=0, help_text="Bytes of its file, set when it is stored (quotas).")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "-step", "-id"]

    def __str__(self):
        return f"{self.run} video @ {self.step}"


class StorageQuota(models.Model):
    """A user's own storage quota, set by the admin: it replaces settings.STORAGE_QUOTA_MB for them (storage_use.py)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="storage_quota")
    megabytes = models.PositiveBigIntegerField(help_text="Megabytes of checkpoints and videos this user may keep "
                                                         "(0: no limit).")

    def __str__(self):
        return f"{self.user}: {self.megabytes or 'no limit'} MB"


class QueueLimit(models.Model):
    """A user's own cap on runs training at once on one queue, set by the admin: it replaces
    settings.MAX_RUNNING_PER_USER_PER_QUEUE for them on that queue (scheduler.py)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="queue_limits")
    queue = models.CharField(max_length=60, help_text="The queue's name: cpu, gpu, or one of RLWEB_QUEUES.")
    max_running = models.PositiveIntegerField(help_text="Runs of this user training at once on this queue "
                                                        "(0: no limit).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "queue"], name="one_queue_limit_per_user_and_queue")]

    def __str__(self):
        return f"{self.user} on {self.queue}: {self.max_running or 'no limit'}"


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


class CheckpointJob(models.Model):
    """A small job on a checkpoint, asked for from the run page and done by a worker of the run's queue
    (checkpoint_jobs.py): evaluate the saved policy for some episodes, or record a video of one episode."""

    class Kind(models.TextChoices):
        EVALUATE = "evaluate"
        VIDEO = "video"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    episodes = models.PositiveSmallIntegerField(default=1)
    queue = models.CharField(max_length=60, blank=True,
                             help_text="The Celery queue it was sent to: jobs, or its run's own when no jobs worker was up.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    result = models.JSONField(default=dict, blank=True, help_text="evaluate: mean, std, length_mean, returns; "
                                                                   "video: episode_return, length")
    video = models.ForeignKey(Video, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = models.TextField(blank=True)
    worker_node = models.CharField(max_length=200, blank=True)
    stop_requested = models.BooleanField(default=False, help_text="cancel pressed while it ran: its worker stops it")
    created = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"{self.kind} of {self.checkpoint}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.FAILED, self.Status.CANCELLED)
