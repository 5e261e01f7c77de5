"""What each user wants to be told about runs, and what was told.

- `AlertRule`: a user's choice, either their default (no experiment: it covers the runs of their own experiments)
  or an override for one experiment they can see (it replaces their default there). What to tell (a run's end in
  the chosen states, a metric that became NaN or infinite, a metric passing a threshold) and where (an email
  address, a webhook URL signed with the rule's secret).
- `Alert`: one event that a rule asked to be told about. At most one per rule, run and kind (a unique constraint):
  a repeated state change, a resumed attempt or a redelivered task never makes a second one.
- `Delivery`: the alert sent over one channel (email or webhook), one per alert and channel; `DeliveryAttempt`: each
  try at it, with what the other side answered (the delivery log on the alerts page).
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from rlweb.experiments.models import Experiment, Run

END_STATES = [(Run.Status.SUCCEEDED, "succeeded"), (Run.Status.FAILED, "failed"), (Run.Status.LOST, "lost"),
              (Run.Status.PRUNED, "pruned (a sweep stopped it early)"), (Run.Status.CANCELLED, "cancelled")]


def new_secret() -> str:
    return secrets.token_hex(32)


class AlertRule(models.Model):
    class Direction(models.TextChoices):
        ABOVE = "above", "rises to or above"
        BELOW = "below", "falls to or below"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_rules")
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, null=True, blank=True,
                                   related_name="alert_rules", help_text="None: the owner's default.")
    on_end = models.JSONField(default=list, blank=True, help_text="Run states whose end is told (END_STATES).")
    on_nan = models.BooleanField(default=False, help_text="Tell when a metric becomes NaN or infinite.")
    threshold_metric = models.CharField(max_length=100, blank=True, help_text="Blank: no threshold alert.")
    threshold_direction = models.CharField(max_length=5, choices=Direction.choices, default=Direction.ABOVE)
    threshold_value = models.FloatField(null=True, blank=True)
    email = models.EmailField(blank=True, help_text="Blank: no email.")
    webhook_url = models.URLField(max_length=500, blank=True, help_text="Blank: no webhook.")
    webhook_secret = models.CharField(max_length=64, default=new_secret,
                                      help_text="Signs each webhook body (HMAC-SHA256, X-Rlweb-Signature).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["owner_id", "experiment_id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "experiment"], name="one_alert_rule_per_experiment"),
            models.UniqueConstraint(fields=["owner"], condition=models.Q(experiment__isnull=True),
                                    name="one_default_alert_rule"),
        ]

    def __str__(self) -> str:
        return f"{self.owner}'s alerts for {self.experiment or 'their experiments'}"

    @property
    def watches_metrics(self) -> bool:
        return self.on_nan or bool(self.threshold_metric)

    def passes(self, value: float) -> bool:
        if self.threshold_direction == self.Direction.BELOW:
            return value <= self.threshold_value
        return value >= self.threshold_value


class Alert(models.Model):
    class Kind(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        LOST = "lost"
        PRUNED = "pruned"
        CANCELLED = "cancelled"
        NAN = "nan", "NaN"
        THRESHOLD = "threshold"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    subject = models.CharField(max_length=300)
    details = models.JSONField(default=dict, blank=True, help_text="The step, the metric and its value, the error.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["rule", "run", "kind"], name="one_alert_per_rule_run_kind")]

    def __str__(self) -> str:
        return self.subject


class Delivery(models.Model):
    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    class Status(models.TextChoices):
        PENDING = "pending"  # not sent yet: a try is due, or the next one waits for its back-off
        SENT = "sent"
        FAILED = "failed"  # every try failed
        REFUSED = "refused"  # a webhook target on a private or loopback address: never tried

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="The email address or the webhook URL, as the rule had it.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(
        null=True, blank=True, help_text="A task is trying it until then: a second copy of the task leaves it alone.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-alert__created", "-id"]
        constraints = [models.UniqueConstraint(fields=["alert", "channel"], name="one_delivery_per_channel")]

    def __str__(self) -> str:
        return f"{self.alert} by {self.channel}: {self.status}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(auto_now_add=True)
    ok = models.BooleanField(default=False)
    status_code = models.PositiveIntegerField(null=True, blank=True, help_text="The webhook's HTTP status.")
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["delivery_id", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="one_attempt_per_number")]

    def __str__(self) -> str:
        return f"try {self.number} of {self.delivery}: {'ok' if self.ok else self.detail}"
