"""Whether the sign-up page is open: `RLWEB_ALLOW_SIGNUP` (settings.ALLOW_SIGNUP) forces it open or closed;
unset, it is open for the first account of a fresh install, then as an admin switched it on the Users page."""

from django.conf import settings
from django.contrib.auth import get_user_model

from rlweb.accounts.models import SiteSettings


def is_open() -> bool:
    if settings.ALLOW_SIGNUP is not None:
        return settings.ALLOW_SIGNUP
    if not get_user_model().objects.exists():
        return True
    return bool(SiteSettings.objects.filter(pk=1).values_list("signup_open", flat=True).first())  # no row: closed


def context(request):
    """`allow_signup` for the templates, asked only by a page that shows it (a callable)."""
    return {"allow_signup": is_open}
