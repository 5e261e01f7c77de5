"""The alert rule form, on the alerts page (the user's default) and an experiment's alerts page (an override).
Every value is checked here, with the error next to its field: a webhook URL also against targets.py (a private
or loopback address is refused, saying why)."""

from __future__ import annotations

import math
import re

from django import forms

from rlweb.alerts import targets
from rlweb.alerts.models import END_STATES, AlertRule

METRIC_NAME = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")


class AlertRuleForm(forms.ModelForm):
    on_end = forms.MultipleChoiceField(choices=END_STATES, required=False, widget=forms.CheckboxSelectMultiple,
                                       label="When a run ends as")
    threshold_direction = forms.ChoiceField(choices=AlertRule.Direction.choices, required=False, label="")
    webhook_url = forms.URLField(max_length=500, required=False, assume_scheme="https", label="Webhook URL",
                                 help_text="Blank: no webhook. A JSON POST, signed (see below); public http(s) "
                                           "addresses only.")

    class Meta:
        model = AlertRule
        fields = ["on_end", "on_nan", "threshold_metric", "threshold_direction", "threshold_value", "email",
                  "webhook_url"]
        labels = {"on_nan": "When a metric becomes NaN or infinite", "threshold_metric": "When the metric",
                  "threshold_direction": "", "threshold_value": "the threshold", "email": "Email to"}
        help_texts = {"on_nan": "Once per run, at the first metric that is.",
                      "threshold_metric": "e.g. eval/return_mean; blank: no threshold alert",
                      "threshold_value": "a number", "email": "Blank: no email."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["threshold_metric"].widget.attrs["list"] = "metric-names"  # the page's suggestions

    def clean_threshold_metric(self) -> str:
        metric = self.cleaned_data["threshold_metric"].strip()
        if metric and not METRIC_NAME.fullmatch(metric):
            raise forms.ValidationError("A metric name such as eval/return_mean: letters, digits, _ . - and /.")
        return metric

    def clean_threshold_direction(self) -> str:
        return self.cleaned_data["threshold_direction"] or AlertRule.Direction.ABOVE

    def clean_threshold_value(self):
        value = self.cleaned_data["threshold_value"]
        if value is not None and not math.isfinite(value):
            raise forms.ValidationError("A finite number.")
        return value

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data["webhook_url"].strip()
        if url:
            try:
                targets.check(url)
            except targets.TargetRefused as refusal:
                raise forms.ValidationError(str(refusal)) from None
        return url

    def clean(self):
        data = super().clean()
        metric, value = data.get("threshold_metric"), data.get("threshold_value")
        if metric and value is None and "threshold_value" not in self.errors:
            self.add_error("threshold_value", "Give the threshold the metric passes.")
        if value is not None and not metric and "threshold_metric" not in self.errors:
            self.add_error("threshold_metric", "Name the metric this threshold is for.")
        wants = data.get("on_end") or data.get("on_nan") or metric
        if wants and not data.get("email") and not data.get("webhook_url") and not self.errors.keys() & {
                "email", "webhook_url"}:
            self.add_error("email", "Say where to be told: an email address, a webhook URL, or both.")
        return data
