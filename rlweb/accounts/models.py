"""Who may create an account: the site's sign-up switch, invitations, and the failed sign-ins that throttle logins."""

from django.conf import settings
from django.core import signing
from django.db import models
from django.urls import reverse
from django.utils import timezone

INVITATION_SALT = "rlweb.accounts.invitation"


class SiteSettings(models.Model):
    """One row (pk 1): what an admin switched on the Users page."""

    signup_open = models.BooleanField(default=False, help_text="Anyone who reaches the site may create an account.")
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "site settings"

    @classmethod
    def current(cls) -> "SiteSettings":
        return cls.objects.get_or_create(pk=1)[0]


class Invitation(models.Model):
    """A one-time link that lets one person create an account until it expires. The link is the row's id
    signed with the secret key (django.core.signing), so it cannot be guessed and nothing secret is stored."""

    class State(models.TextChoices):
        OPEN = "open"
        USED = "used"
        EXPIRED = "expired"
        REVOKED = "revoked"

    note = models.CharField(max_length=200, blank=True, help_text="Who it is for (only staff see it).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="invitation")
    used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"invitation {self.pk} ({self.state})"

    @property
    def state(self) -> str:
        if self.used_at:
            return self.State.USED
        if self.revoked_at:
            return self.State.REVOKED
        return self.State.EXPIRED if self.expires_at <= timezone.now() else self.State.OPEN

    @property
    def token(self) -> str:
        return signing.dumps(self.pk, salt=INVITATION_SALT)

    def get_absolute_url(self):
        return reverse("invitation-accept", args=[self.token])

    @classmethod
    def from_token(cls, token: str) -> "Invitation | None":
        try:
            pk = signing.loads(token, salt=INVITATION_SALT)
        except signing.BadSignature:
            return None
        return cls.objects.filter(pk=pk).first() if isinstance(pk, int) else None

    def use(self, user) -> bool:
        """Mark the invitation used by `user`; False when it was used, revoked or expired meanwhile."""
        now = timezone.now()
        return bool(Invitation.objects.filter(pk=self.pk, used_at=None, revoked_at=None, expires_at__gt=now)
                    .update(used_by=user, used_at=now))

    def revoke(self) -> bool:
        return bool(Invitation.objects.filter(pk=self.pk, used_at=None, revoked_at=None)
                    .update(revoked_at=timezone.now()))


class LoginFailure(models.Model):
    """One refused sign-in, kept for the throttle's window (throttle.py)."""

    username = models.CharField(max_length=150, db_index=True)  # case-folded
    ip = models.CharField(max_length=45, blank=True, db_index=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]
