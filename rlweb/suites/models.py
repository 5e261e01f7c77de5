"""A suite launches one or more algorithms on a list of environments with N seeds each, and judges them together
(report.py: normalised scores, aggregates across tasks with bootstrap intervals).

Each algorithm x environment is a `SuiteTask`: its hyperparameters as the experiment form validated them, and the
ordinary experiment (one run per seed) it became once launched. A task waits (no experiment yet) while its owner
has no room under the site's limit of queued and running runs; `launching.advance` starts it when room opens.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from rlweb.experiments.models import Experiment


class Suite(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"  # tasks wait for room, or their runs are queued or training
        FINISHED = "finished"  # every task's runs have ended
        CANCELLED = "cancelled"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="suites")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="suites", help_text="Shared with its members, runs included; none: private.")
    name = models.CharField(max_length=200)
    algorithms = models.JSONField(default=list, help_text="The algorithms' names, in the order chosen.")
    env_ids = models.JSONField(default=list, help_text="The environments' ids, in the order given.")
    env_list = models.CharField(max_length=40, blank=True, help_text="The named list they came from, if any.")
    num_seeds = models.PositiveSmallIntegerField(default=3)
    total_steps = models.PositiveBigIntegerField()
    eval_interval = models.PositiveIntegerField()
    eval_episodes = models.PositiveIntegerField(default=5)
    device = models.CharField(max_length=60, default=Experiment.Device.AUTO)
    use_presets = models.BooleanField(default=True, help_text="Tasks start from the tuned preset of their "
                                                              "algorithm and environment, where one exists.")
    overrides = models.JSONField(default=dict, help_text="{algorithm or '*': {hyperparameter: text}} on top.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    submission_token = models.CharField(max_length=64, blank=True,
                                        help_text="The form's one-time token: the same form posted twice makes one suite.")
    created = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "submission_token"], condition=~Q(submission_token=""),
                                               name="unique_suite_submission_per_owner")]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("suite-detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.RUNNING


class SuiteTask(models.Model):
    """One algorithm on one environment of a suite: its validated values, and its experiment once launched."""

    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="tasks")
    position = models.PositiveIntegerField(help_text="Launch order: environment by environment.")
    algorithm = models.CharField(max_length=50)
    env_id = models.CharField("environment id", max_length=200)
    hyperparameters = models.JSONField(default=dict, help_text="Parsed values, as trainer.validate returned them.")
    preset = models.CharField(max_length=100, blank=True)
    experiment = models.OneToOneField(Experiment, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="suite_task", help_text="None: waiting for room (or deleted).")
    launched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["suite_id", "position"]
        constraints = [models.UniqueConstraint(fields=["suite", "position"], name="unique_task_position_per_suite")]

    def __str__(self):
        return f"{self.suite}: {self.algorithm} on {self.env_id}"

    @property
    def is_waiting(self) -> bool:
        return self.launched_at is None
