"""When alerts are raised: a run's end (the `run_ended` signal, in whatever process ended it) and the metrics a
worker's run reports (a watcher of its sink, rlweb/experiments/sink.py `watch_runs`).

Whose rules count for a run of experiment E: every user's override for E (while they can still see E), and
the default of E's owner unless the owner has an override for E. `raise_alert` writes the alert and its
deliveries in one transaction, then sends one task per delivery once it commits (delivery.py); the unique
alert per rule, run and kind makes a second raise of the same event a no-op.

The watcher is on the training path: it loads the rules once per attempt, and for each event does a few dict
lookups; it touches the database only when an alert is raised (once per rule, run and kind).
"""

from __future__ import annotations

import logging
import math

from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone
from trainer.events import METRIC_KINDS, Sink

from rlweb.alerts import delivery
from rlweb.alerts.models import Alert, AlertRule, Delivery
from rlweb.experiments.models import Experiment, Run
from rlweb.projects import access

logger = logging.getLogger(__name__)


def rules_for(experiment: Experiment) -> list[AlertRule]:
    """The rules that apply to the runs of `experiment` (see above)."""
    overrides = list(AlertRule.objects.filter(experiment=experiment).select_related("owner"))
    rules = [rule for rule in overrides
             if Experiment.objects.filter(access.visible(rule.owner), pk=experiment.pk).exists()]
    if not any(rule.owner_id == experiment.owner_id for rule in overrides):
        rules += AlertRule.objects.filter(owner_id=experiment.owner_id, experiment__isnull=True)
    return rules


def describe(run: Run) -> str:
    return f"{run.experiment.name} (seed {run.seed}, run {run.pk})"


def raise_alert(rule: AlertRule, run: Run, kind: str, subject: str, details: dict) -> Alert | None:
    """The alert of `rule` for this event of `run`, with a delivery per channel of the rule, each sent to the jobs
    queue once the transaction commits; None when this rule already raised it for this run (or sends nowhere)."""
    channels = [(Delivery.Channel.EMAIL, rule.email), (Delivery.Channel.WEBHOOK, rule.webhook_url)]
    channels = [(channel, target) for channel, target in channels if target]
    if not channels:
        return None
    try:
        with transaction.atomic():
            alert = Alert.objects.create(rule=rule, run=run, kind=kind, subject=" ".join(subject.split())[:300],
                                         details=details)
            deliveries = [Delivery.objects.create(alert=alert, channel=channel, target=target,
                                                  next_try_at=timezone.now()) for channel, target in channels]
    except IntegrityError:
        return None  # raised before: a repeated state change, another attempt, a redelivered task
    for row in deliveries:
        transaction.on_commit(lambda pk=row.pk: delivery.send(pk))
    return alert


def alert_run_ended(sender, run_id: int, status: str, **kwargs) -> None:
    """`run_ended` receiver: each rule that asked for this end state raises its alert."""
    if status not in Alert.Kind.values:
        return
    run = Run.objects.select_related("experiment").filter(pk=run_id).first()
    if run is None:
        return
    for rule in rules_for(run.experiment):
        if status in rule.on_end:
            details = {"status": status, "step": run.steps_done, "error": run.error[:1000]}
            raise_alert(rule, run, status, f"{describe(run)} {status}", details)


def watch_run(sink) -> "MetricAlerts | None":
    """`watch_runs` hook: a watcher for a run whose rules look at its metrics, else None (nothing on its path)."""
    try:
        rules = [rule for rule in rules_for(sink.run.experiment)
                 if rule.watches_metrics and (rule.email or rule.webhook_url)]
    except DatabaseError as error:  # training goes on without metric alerts
        logger.warning("run %s: cannot read its alert rules (%s)", sink.run.pk, error)
        return None
    return MetricAlerts(sink.run, rules) if rules else None


class MetricAlerts(Sink):
    """Sees each event a run reports (as stored: NaN and infinities are null there, and the sink names them in
    the record's `not_finite`), and raises a rule's NaN or threshold alert the first time it happens."""

    def __init__(self, run: Run, rules: list[AlertRule]):
        self.run = run
        self.nan_rules = [rule for rule in rules if rule.on_nan]
        self.threshold_rules = [rule for rule in rules if rule.threshold_metric]
        self.raised: set[tuple[int, str]] = set()

    def emit(self, record: dict) -> None:
        if record["kind"] not in METRIC_KINDS:
            return
        not_finite = record.get("not_finite")
        if not_finite:
            for rule in self.nan_rules:
                self.once(rule, Alert.Kind.NAN, f"{describe(self.run)}: {', '.join(not_finite)} became NaN or infinite",
                          {"step": record["step"], "metrics": not_finite})
        values = record["values"]
        for rule in self.threshold_rules:
            value = values.get(rule.threshold_metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                    and rule.passes(value):
                self.once(rule, Alert.Kind.THRESHOLD,
                          f"{describe(self.run)}: {rule.threshold_metric} = {value:g} "
                          f"{rule.get_threshold_direction_display()} {rule.threshold_value:g}",
                          {"step": record["step"], "metric": rule.threshold_metric, "value": value,
                           "threshold": rule.threshold_value, "direction": rule.threshold_direction})

    def once(self, rule: AlertRule, kind: str, subject: str, details: dict) -> None:
        if (rule.pk, kind) not in self.raised:
            self.raised.add((rule.pk, kind))
            raise_alert(rule, self.run, kind, subject, details)
