"""API tokens. A token is `rlw_<prefix>_<secret>`: the prefix is stored in the clear to find the row, the secret
only as its SHA-256, so a copy of the database lets no one in. The whole token is shown once, when it is made."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

PREFIX_BYTES = 5  # 10 hex digits: never an "_", which ends the prefix in the token text
SECRET_BYTES = 32


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What it is for: a laptop, a CI job, a script.")
    prefix = models.CharField(max_length=16, unique=True, help_text="The token's public part, to find it.")
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the secret part, as hex.")
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Blank: never.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str, expires_at=None) -> tuple[ApiToken, str]:
        """A new token row for `user` and the full token text, which is never stored and cannot be shown again."""
        prefix, secret = secrets.token_hex(PREFIX_BYTES), secrets.token_urlsafe(SECRET_BYTES)
        token = cls.objects.create(user=user, name=name, prefix=prefix, secret_hash=digest(secret),
                                   expires_at=expires_at)
        return token, f"rlw_{prefix}_{secret}"

    @classmethod
    def find(cls, text: str) -> ApiToken | None:
        """The row the token text belongs to when its secret matches (revoked and expired ones included), or None."""
        start, _, rest = text.partition("_")
        prefix, _, secret = rest.partition("_")
        if start != "rlw" or not prefix or not secret:
            return None
        token = cls.objects.select_related("user").filter(prefix=prefix).first()
        if token is None or not secrets.compare_digest(token.secret_hash, digest(secret)):
            return None
        return token

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and not self.is_expired and self.user.is_active
