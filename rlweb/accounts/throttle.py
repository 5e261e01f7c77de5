"""Login throttling with a growing delay, counted where the attempts come from, so that nobody can lock
someone else out.

Refused sign-ins are rows in the database (LoginFailure), so every web process sees the same counts. Two
counts hold a client back, both over the refused sign-ins of the last `LOGIN_FAILURE_HOURS` (an IPv6 client
counts by its /64 network):
- a username together with the client's address: `LOGIN_FAILURE_LIMIT` of them;
- the client's address, whatever the usernames: `LOGIN_FAILURE_LIMIT_PER_IP` of them.
At the limit, the next attempt waits `LOGIN_FIRST_DELAY_SECONDS` after the latest refused one; each
further refusal doubles the wait, up to `LOGIN_LOCKOUT_MINUTES`. An attempt made while waiting is refused
before the password is checked and is not counted, so hammering neither guesses nor lengthens anything.
A username is never held back as such: its owner, at their own address, signs in while someone elsewhere
hammers it. Signing in clears the username's count at that address; staff clear a user's counts on the
Users page (or `manage.py clear_sign_in_failures`).

The check sits in the authentication backend, so it guards every form that signs in (ours and
/admin/login/); SignInForm turns it into a message that says when to try again, and that says the same
whether or not the username exists.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.dispatch import receiver
from django.utils import timezone

from rlweb.accounts.models import LoginFailure

HELD_BACK = "_rlweb_sign_in_held_back"  # set on a request refused before its password was checked


def client_ip(request) -> str:
    """The peer address (behind a proxy, let uvicorn set it from X-Forwarded-For: --forwarded-allow-ips), as
    address_key counts it."""
    return address_key(request.META.get("REMOTE_ADDR") or "") if request is not None else ""


def address_key(address: str) -> str:
    """An IPv4 address as it is; an IPv6 one as its /64 network, which one machine usually has whole, so that
    stepping through its addresses does not start the counts afresh."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return address.strip()[:45]
    if ip.version == 6 and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip.ipv4_mapped if ip.version == 6 else ip)


def username_key(username) -> str:
    return str(username or "").casefold()[:150]


def recent_failures() -> QuerySet:
    return LoginFailure.objects.filter(at__gte=timezone.now() - timedelta(hours=settings.LOGIN_FAILURE_HOURS))


def delay(failures: int, limit: int) -> timedelta | None:
    """How long to wait after the latest of `failures` refused sign-ins: none below the limit, then the
    first delay, doubled for each failure past the limit, capped."""
    if failures < limit:
        return None
    cap = settings.LOGIN_LOCKOUT_MINUTES * 60
    doublings = min(failures - limit, 32)  # 2**32 seconds is past any cap
    return timedelta(seconds=min(cap, settings.LOGIN_FIRST_DELAY_SECONDS * 2 ** doublings))


def held_until(username, ip: str) -> datetime | None:
    """Until when a sign-in as `username` from `ip` waits (None: it may go ahead now)."""
    recent = recent_failures()
    ends = []
    for rows, limit in ((recent.filter(username=username_key(username), ip=ip), settings.LOGIN_FAILURE_LIMIT),
                        (recent.filter(ip=ip), settings.LOGIN_FAILURE_LIMIT_PER_IP)):
        wait = delay(rows.count(), limit)
        if wait is not None:
            ends.append(rows.order_by("-at").values_list("at", flat=True)[0] + wait)
    until = max(ends, default=None)
    return until if until is not None and until > timezone.now() else None


def wait_message(until: datetime) -> str:
    """The same words whether or not the username exists: the counts are kept for any username typed."""
    seconds = max(1, math.ceil((until - timezone.now()).total_seconds()))
    minutes = math.ceil(seconds / 60)
    if seconds <= 45:  # "1 minute" from 46 seconds on, so the first wait reads the same on a slow server
        wait = f"{seconds} second{'s' if seconds != 1 else ''}"
    else:
        wait = f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"Too many failed sign-ins from this address: try again in {wait}."


def clear_failures(username=None, ip: str | None = None) -> int:
    """Forget the refused sign-ins for a username (from every address) or an address, or both together;
    returns how many were forgotten."""
    rows = LoginFailure.objects.all()
    if username is not None:
        rows = rows.filter(username=username_key(username))
    if ip is not None:
        rows = rows.filter(ip=address_key(ip))
    return rows.delete()[0]


@receiver(user_login_failed)
def record_failure(sender, credentials, request=None, **kwargs):
    if request is not None and getattr(request, HELD_BACK, False):
        return  # refused for waiting, the password unchecked: not counted
    now = timezone.now()
    LoginFailure.objects.filter(at__lt=now - timedelta(hours=settings.LOGIN_FAILURE_HOURS)).delete()
    LoginFailure.objects.create(username=username_key(credentials.get("username")), ip=client_ip(request), at=now)


@receiver(user_logged_in)
def forget_failures_on_success(sender, request, user, **kwargs):
    if request is not None:
        clear_failures(user.get_username(), client_ip(request))


class ThrottledModelBackend(ModelBackend):
    """Django's backend, refusing a client that must still wait before the password is checked."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if held_until(username or kwargs.get("username"), client_ip(request)):
            if request is not None:
                setattr(request, HELD_BACK, True)
            raise PermissionDenied("too many failed sign-ins")
        return super().authenticate(request, username, password, **kwargs)


class SignInForm(AuthenticationForm):
    """The login form; a client that must wait gets a message saying for how long."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            until = held_until(self.cleaned_data.get("username"), client_ip(self.request))
            if until:
                raise ValidationError(wait_message(until), code="throttled") from None
            raise
