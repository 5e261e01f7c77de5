"""The alerts pages: the user's default rule with their overrides and the delivery log (/account/alerts/), and
one experiment's override (/experiments/<id>/alerts/, for anyone who sees the experiment; strangers get 404).
GET only reads; a POST saves the form, resets the override to the default, or makes a new webhook secret."""

from __future__ import annotations

from django.contrib import messages
from django.db import IntegrityError, transaction
from django.shortcuts import get_object_or_404, redirect, render

from rlweb.alerts.forms import AlertRuleForm
from rlweb.alerts.models import AlertRule, Delivery, new_secret
from rlweb.experiments.models import Experiment, MetricBucket
from rlweb.projects import access

LOG_LENGTH = 50


def delivery_log(user, experiment: Experiment | None = None):
    deliveries = Delivery.objects.filter(alert__rule__owner=user)
    if experiment is not None:
        deliveries = deliveries.filter(alert__run__experiment=experiment)
    return deliveries.select_related("alert__run__experiment").prefetch_related("tries")[:LOG_LENGTH]


# what the metric field suggests where no run is there to read names from: rlweb's own, and CleanRL's
COMMON_METRICS = ["eval/return_mean", "rollout/episode_return", "train/loss", "charts/episodic_return"]


def edit_rule(request, rule: AlertRule, template: str, context: dict):
    """GET: the form; POST: save it, or make a new webhook secret (action=new-secret)."""
    if request.method == "POST" and request.POST.get("action") == "new-secret":
        if rule.pk:
            AlertRule.objects.filter(pk=rule.pk).update(webhook_secret=new_secret())
            messages.success(request, "A new webhook secret: webhooks are signed with it from now on.")
        return redirect(request.path)
    form = AlertRuleForm(request.POST, instance=rule) if request.method == "POST" else AlertRuleForm(instance=rule)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                form.save()
        except IntegrityError:  # the same user saved this rule for the first time in another tab meanwhile
            form.add_error(None, "These alerts were saved meanwhile on another page: reload and try again.")
        else:
            messages.success(request, "Alerts saved.")
            return redirect(request.path)
    return render(request, template, {"form": form, "rule": rule, **context})


def alert_settings(request):
    rule = AlertRule.objects.filter(owner=request.user, experiment__isnull=True).first() or AlertRule(
        owner=request.user, email=request.user.email)
    overrides = AlertRule.objects.filter(  # not those of experiments they see no more (they left the project)
        owner=request.user, experiment__in=Experiment.objects.filter(access.visible(request.user))).select_related(
        "experiment")
    return edit_rule(request, rule, "alerts/settings.html", {
        "overrides": overrides, "deliveries": delivery_log(request.user), "metric_names": COMMON_METRICS})


def experiment_alerts(request, experiment_id: int):
    experiment = get_object_or_404(Experiment.objects.filter(access.visible(request.user)), pk=experiment_id)
    rule = AlertRule.objects.filter(owner=request.user, experiment=experiment).first()
    if request.method == "POST" and request.POST.get("action") == "use-default":
        AlertRule.objects.filter(owner=request.user, experiment=experiment).delete()
        messages.success(request, "This experiment follows your default alerts again.")
        return redirect(request.path)
    if rule is None:  # a new override starts from the user's default
        default = AlertRule.objects.filter(owner=request.user, experiment__isnull=True).first()
        rule = AlertRule(owner=request.user, experiment=experiment, email=request.user.email)
        if default is not None:
            for field in AlertRuleForm.Meta.fields:
                setattr(rule, field, getattr(default, field))
    return edit_rule(request, rule, "alerts/experiment_alerts.html", {
        "experiment": experiment, "deliveries": delivery_log(request.user, experiment),
        "default_applies": experiment.owner_id == request.user.pk, "metric_names": metric_names(experiment)})


def metric_names(experiment: Experiment) -> list[str]:
    """The metric field's suggestions: every metric the experiment's runs reported (a logged script's own names
    too), or the usual ones before any has."""
    reported = MetricBucket.objects.filter(run__experiment=experiment, index=0).values_list("key", flat=True)
    return sorted(set(reported)) or COMMON_METRICS
