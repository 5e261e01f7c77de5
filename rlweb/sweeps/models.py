"""A sweep searches one algorithm's hyperparameters on one environment with Optuna (study.py). Each of its
trials is an ordinary experiment (one run per seed) that the sweep made with the sampled values; `Trial` links
the two and mirrors the trial's Optuna state for the pages. The Optuna study itself lives in the same database
(Optuna's own tables), named by `Sweep.study_name`.
"""

import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse

from rlweb.experiments.models import Experiment

OBJECTIVES = {
    "final": "the final evaluation's return",
    "best": "the best evaluation's return",
    "last": "the mean of the last N evaluations",
    "threshold": "env steps to reach a return (fewer is better)",
}


def new_study_name() -> str:
    return f"rlweb-sweep-{uuid.uuid4().hex}"


class Sweep(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"  # trials are queued, training or still to be asked for
        FINISHED = "finished"  # every trial has ended
        CANCELLED = "cancelled"

    class Sampler(models.TextChoices):
        TPE = "tpe", "TPE (Bayesian)"
        RANDOM = "random", "random"
        GRID = "grid", "grid (every combination of the listed values)"

    class Method(models.TextChoices):
        OPTUNA = "optuna", "Optuna (trials one after another, sampled and pruned)"
        PBT = "pbt", "population-based training"

    class Pruner(models.TextChoices):
        NONE = "none", "none"
        MEDIAN = "median", "median (stop a trial below the median of finished ones)"
        HYPERBAND = "hyperband", "Hyperband (successive halving)"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sweeps")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="sweeps", help_text="Shared with its members, trials included; none: private.")
    name = models.CharField(max_length=200)
    algorithm = models.CharField(max_length=50)
    env_id = models.CharField("environment id", max_length=200)
    preset = models.CharField(max_length=100, blank=True, help_text="The preset the fixed values started from.")
    fixed = models.JSONField(default=dict, help_text="Hyperparameters every trial shares (parsed values).")
    space = models.JSONField(default=list, help_text="The searched ones: [{name, type, low, high, log, choices}].")
    total_steps = models.PositiveBigIntegerField()
    eval_interval = models.PositiveIntegerField()
    eval_episodes = models.PositiveIntegerField(default=5)
    objective = models.CharField(max_length=20, default="final", choices=[(key, key) for key in OBJECTIVES])
    last_evaluations = models.PositiveSmallIntegerField(default=3, help_text="N, for the objective `last`.")
    threshold = models.FloatField(null=True, blank=True, help_text="The return, for the objective `threshold`.")
    sampler = models.CharField(max_length=20, choices=Sampler.choices, default=Sampler.TPE)
    seed = models.IntegerField(default=0, help_text="The sampler's seed: the same sweep samples the same values.")
    pruner = models.CharField(max_length=20, choices=Pruner.choices, default=Pruner.MEDIAN)
    pruner_warmup_steps = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Env steps of a trial before the median pruner may stop it (blank: a third).")
    trials = models.PositiveIntegerField(default=20, help_text="Trials in all (more can be added later).")
    parallel = models.PositiveSmallIntegerField(default=2, help_text="Trials training at once.")
    seeds_per_trial = models.PositiveSmallIntegerField(default=1)
    device = models.CharField(max_length=60, default=Experiment.Device.AUTO)
    method = models.CharField(max_length=20, choices=Method.choices, default=Method.OPTUNA)
    ready_interval = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="PBT: env steps between the points where the worst members copy the best.")
    quantile = models.FloatField(default=0.25, help_text="PBT: the share of members that copy, and that are copied.")
    resample_probability = models.FloatField(
        default=0.25, help_text="PBT: the chance that a copied value is drawn anew instead of multiplied by 0.8 or 1.2.")
    study_name = models.CharField(max_length=100, unique=True, default=new_study_name)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    created = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("sweep-detail", args=[self.pk])

    @property
    def direction(self) -> str:
        return "minimize" if self.objective == "threshold" else "maximize"

    @property
    def objective_text(self) -> str:
        if self.objective == "last":
            return f"the mean of the last {self.last_evaluations} evaluations' returns"
        if self.objective == "threshold":
            return f"env steps until an evaluation returns {self.threshold:g} (fewer is better)"
        return OBJECTIVES[self.objective]

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.RUNNING

    @property
    def is_pbt(self) -> bool:
        return self.method == self.Method.PBT


class Trial(models.Model):
    """One trial of a sweep: the experiment it trains, and its state as Optuna records it."""

    class State(models.TextChoices):
        RUNNING = "running"
        COMPLETE = "complete"
        PRUNED = "pruned"
        FAILED = "failed"

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trial_set")
    number = models.PositiveIntegerField(help_text="Optuna's trial number in the study.")
    experiment = models.OneToOneField(Experiment, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="sweep_trial", help_text="None: its values were refused.")
    params = models.JSONField(default=dict, help_text="The sampled values.")
    state = models.CharField(max_length=20, choices=State.choices, default=State.RUNNING)
    value = models.FloatField(null=True, blank=True, help_text="The objective (mean over its seeds).")
    steps = models.PositiveBigIntegerField(default=0, help_text="Env steps its runs trained, all seeds.")
    pruned_at = models.PositiveBigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="Why it was pruned or failed.")
    ready_step = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="PBT: the ready step its run stopped at, to wait for the population (pbt.py).")

    class Meta:
        ordering = ["sweep_id", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="unique_trial_number_per_sweep")]

    def __str__(self):
        return f"{self.sweep} trial {self.number}"

    @property
    def is_finished(self) -> bool:
        return self.state != self.State.RUNNING


class PbtCopy(models.Model):
    """PBT's lineage: at a ready step, `member` (a trial of a PBT sweep) copied `donor`'s checkpoint and went on
    with new values (rlweb/sweeps/pbt.py)."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="copies")
    member = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="copies")
    donor = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="copied_by")
    step = models.PositiveBigIntegerField(help_text="The step of the copied checkpoint, which the member goes on from.")
    member_score = models.FloatField(null=True, blank=True, help_text="The member's recent evaluation, ranked.")
    donor_score = models.FloatField(null=True, blank=True)
    old = models.JSONField(default=dict, help_text="The member's searched values before.")
    donor_values = models.JSONField(default=dict, help_text="The donor's values, explored from.")
    new = models.JSONField(default=dict, help_text="The values it goes on with (a live change of its run).")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["sweep_id", "step", "id"]

    def __str__(self):
        return f"{self.sweep}: trial {self.member_id} copied {self.donor_id} at {self.step}"
