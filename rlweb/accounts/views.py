"""Sign-up, invitations and the staff-only Users page (open or close sign-up, invite, create users, clear
failed sign-ins)."""

from __future__ import annotations

import functools

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_not_required
from django.db import transaction
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from rlweb.accounts import signup as signup_policy
from rlweb.accounts import throttle
from rlweb.accounts.forms import InvitationForm, SignupForm
from rlweb.accounts.models import Invitation, SiteSettings
from rlweb.experiments.models import Run


def staff_only(view):
    """Other users get a 404, as for other users' objects."""
    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)
    return wrapper


@login_not_required
def signup(request):
    if not signup_policy.is_open():
        return render(request, "accounts/signup_closed.html", status=403)
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        login(request, form.save(), backend=settings.AUTHENTICATION_BACKENDS[0])
        return redirect("experiment-list")
    return render(request, "registration/signup.html", {"form": form})


class InvitationTaken(Exception):
    pass


@login_not_required
def invitation_accept(request, token: str):
    """The page an invitation link opens: one account, once, before it expires."""
    invitation = Invitation.from_token(token)
    if invitation is None:
        raise Http404("No such invitation.")
    if invitation.state != Invitation.State.OPEN:
        return render(request, "accounts/invitation_closed.html", {"invitation": invitation}, status=410)
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                user = form.save()
                if not invitation.use(user):
                    raise InvitationTaken
        except InvitationTaken:
            return render(request, "accounts/invitation_closed.html", {"invitation": invitation}, status=410)
        login(request, user, backend=settings.AUTHENTICATION_BACKENDS[0])
        messages.success(request, f"Welcome, {user.get_username()}.")
        return redirect("experiment-list")
    return render(request, "registration/signup.html", {"form": form, "invitation": invitation})


@staff_only
def user_list(request, user_form=None, invitation_form=None, status=200):
    users = get_user_model().objects.annotate(
        experiment_count=Count("experiments", distinct=True),
        active_runs=Count("experiments__runs", filter=Q(experiments__runs__status__in=Run.ACTIVE), distinct=True),
    ).order_by("username")
    failures = dict(throttle.recent_failures().values("username").annotate(count=Count("id"))
                    .values_list("username", "count"))
    for account in users:
        account.failed_sign_ins = failures.get(throttle.username_key(account.get_username()), 0)
    return render(request, "accounts/user_list.html", {
        "users": users, "invitations": Invitation.objects.select_related("used_by", "created_by")[:100],
        "user_form": user_form or SignupForm(prefix="new"), "invitation_form": invitation_form or InvitationForm(),
        "signup_open": signup_policy.is_open(), "signup_forced": settings.ALLOW_SIGNUP is not None},
        status=status)


@staff_only
@require_POST
def user_create(request):
    form = SignupForm(request.POST, prefix="new")
    if not form.is_valid():
        return user_list(request, user_form=form, status=400)
    user = form.save()
    messages.success(request, f"Created the account “{user.get_username()}”: give them its password.")
    return redirect("user-list")


@staff_only
@require_POST
def user_unlock(request, user_id: int):
    """Forget a user's refused sign-ins from every address, so that no delay holds them back."""
    account = get_object_or_404(get_user_model(), pk=user_id)
    cleared = throttle.clear_failures(account.get_username())
    messages.success(request, f"Cleared {cleared} failed sign-in{'s' if cleared != 1 else ''} for "
                              f"“{account.get_username()}”: they can sign in at once.")
    return redirect("user-list")


@staff_only
@require_POST
def invitation_create(request):
    form = InvitationForm(request.POST)
    if not form.is_valid():
        return user_list(request, invitation_form=form, status=400)
    invitation = form.save(created_by=request.user)
    messages.success(request, f"Invitation ready: send this link, it works once until "
                              f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC: "
                              f"{request.build_absolute_uri(invitation.get_absolute_url())}")
    return redirect("user-list")


@staff_only
@require_POST
def invitation_revoke(request, invitation_id: int):
    invitation = get_object_or_404(Invitation, pk=invitation_id)
    if invitation.revoke():
        messages.success(request, "Invitation revoked: its link no longer works.")
    else:
        messages.info(request, f"This invitation is already {invitation.state}.")
    return redirect("user-list")


@staff_only
@require_POST
def signup_switch(request):
    """Open or close the sign-up page (unless RLWEB_ALLOW_SIGNUP fixes it)."""
    if settings.ALLOW_SIGNUP is not None:
        messages.error(request, f"RLWEB_ALLOW_SIGNUP={settings.ALLOW_SIGNUP} fixes this; change it there.")
        return redirect("user-list")
    site = SiteSettings.current()
    site.signup_open = request.POST.get("open") == "True"
    site.changed_by, site.changed_at = request.user, timezone.now()
    site.save()
    messages.success(request, "Sign-up is open to anyone who reaches the site." if site.signup_open
                     else "Sign-up is closed: new people need an invitation.")
    return redirect("user-list")
