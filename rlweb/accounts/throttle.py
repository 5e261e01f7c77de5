"""Login throttling: a username or a client address with too many refused sign-ins in the last
`LOGIN_LOCKOUT_MINUTES` is refused, even with the right password, until it has fewer again.

The refused sign-ins are rows in the database (LoginFailure), so every web process sees the same counts.
Every refused attempt counts, also one refused because of the lock: an attacker who keeps trying keeps
the lock on. The check sits in the authentication backend, so it guards every form that signs in
(ours and /admin/login/); SignInForm turns it into a clear message.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied, ValidationError
from django.dispatch import receiver
from django.utils import timezone

from rlweb.accounts.models import LoginFailure


def client_ip(request) -> str:
    """The peer address (behind a proxy, let uvicorn set it from X-Forwarded-For: --forwarded-allow-ips)."""
    return (request.META.get("REMOTE_ADDR") or "")[:45] if request is not None else ""


def username_key(username) -> str:
    return str(username or "").casefold()[:150]


def window() -> timedelta:
    return timedelta(minutes=settings.LOGIN_LOCKOUT_MINUTES)


def locked_until(username, ip: str) -> datetime | None:
    """When the lock on `username` or `ip` ends (None: not locked): once the limit-th latest failure
    leaves the window."""
    recent = LoginFailure.objects.filter(at__gte=timezone.now() - window()).order_by("-at")
    ends = []
    for rows, limit in ((recent.filter(username=username_key(username)), settings.LOGIN_FAILURE_LIMIT),
                        (recent.filter(ip=ip) if ip else recent.none(), settings.LOGIN_FAILURE_LIMIT_PER_IP)):
        oldest_counted = next(iter(rows.values_list("at", flat=True)[limit - 1:limit]), None)
        if oldest_counted is not None:
            ends.append(oldest_counted + window())
    return max(ends, default=None)


def lock_message(until: datetime) -> str:
    minutes = max(1, math.ceil((until - timezone.now()).total_seconds() / 60))
    return (f"Too many failed sign-ins for this username or from this address: try again in {minutes} "
            f"minute{'s' if minutes != 1 else ''}.")


@receiver(user_login_failed)
def record_failure(sender, credentials, request=None, **kwargs):
    now = timezone.now()
    LoginFailure.objects.filter(at__lt=now - window()).delete()
    LoginFailure.objects.create(username=username_key(credentials.get("username")), ip=client_ip(request), at=now)


class ThrottledModelBackend(ModelBackend):
    """Django's backend, refusing a locked username or address before the password is checked."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if locked_until(username or kwargs.get("username"), client_ip(request)):
            raise PermissionDenied("too many failed sign-ins")
        return super().authenticate(request, username, password, **kwargs)


class SignInForm(AuthenticationForm):
    """The login form; a locked username or address gets a message saying for how long."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            until = locked_until(self.cleaned_data.get("username"), client_ip(self.request))
            if until:
                raise ValidationError(lock_message(until), code="throttled") from None
            raise
