"""The Tokens page (/account/tokens/): the user's API tokens, a form to make one and a Revoke button on each.
A new token's text is shown once, on the page that answers the form, and never stored: only its hash is."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from rlweb.api.models import ApiToken

MAX_DAYS = 3650


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for: a laptop, a CI job, a script.")
    days = forms.IntegerField(label="Expires after (days)", required=False, min_value=1, max_value=MAX_DAYS,
                              help_text="Blank: never.")


def expiry(days: int | None):
    return timezone.now() + timedelta(days=days) if days else None


def token_list(request):
    """GET: the page; POST: make a token and show its text, once."""
    form = TokenForm(request.POST or None)
    new_text = None
    if request.method == "POST" and form.is_valid():
        _, new_text = ApiToken.issue(request.user, form.cleaned_data["name"], expiry(form.cleaned_data["days"]))
        form = TokenForm()
    return render(request, "api/token_list.html", {
        "form": form, "new_text": new_text, "tokens": ApiToken.objects.filter(user=request.user), "now": timezone.now()})


@require_POST
def token_revoke(request, token_id: int):
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    messages.success(request, f"Revoked “{token.name}”: requests with it are refused from now on.")
    return redirect("token-list")
