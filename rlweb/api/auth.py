"""Who a request to the API comes from: a bearer token (`Authorization: Bearer rlw_...`), or the signed-in
session of a browser. Token requests need no CSRF token (a script holds no cookie a page could ride on); session
requests keep Django's CSRF check (ninja's `django_auth`, tried after the token)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from rlweb.api.models import ApiToken

LAST_USED_EVERY = timedelta(minutes=1)  # last_used_at is written at most this often per token


class TokenAuth(HttpBearer):
    """The token's user; 401 for a token that is unknown, revoked or expired (never a fall-through to the
    session: a script with a dead token should hear so)."""

    def authenticate(self, request, token: str):
        found = ApiToken.find(token.strip())
        if found is None:
            raise HttpError(401, "Unknown API token.")
        if found.revoked_at is not None:
            raise HttpError(401, "This API token was revoked.")
        if found.is_expired:
            raise HttpError(401, "This API token has expired.")
        if not found.user.is_active:
            raise HttpError(401, "This API token's user is disabled.")
        now = timezone.now()
        if found.last_used_at is None or now - found.last_used_at >= LAST_USED_EVERY:
            ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
        request.api_token = found
        request.user = found.user  # the access helpers of the views read it
        return found.user


def user_of(request):
    """The user a request was authenticated as (a token's or the session's)."""
    return request.auth


__all__ = ["TokenAuth", "django_auth", "user_of"]
