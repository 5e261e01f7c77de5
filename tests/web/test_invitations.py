"""Invitations: a staff member makes a one-time link with an expiry; it lets one person create an account."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.accounts.models import Invitation
from tests.web.helpers import PASSWORD


@pytest.fixture
def staff_client(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client


def invite(staff_client, note="for Ada", days=7) -> Invitation:
    response = staff_client.post(reverse("invitation-create"), {"note": note, "days": str(days)})
    assert response.status_code == 302
    return Invitation.objects.get(note=note)


def accept(url, username):
    return Client().post(url, {"username": username, "password1": PASSWORD, "password2": PASSWORD})


def test_an_invitation_link_creates_one_account_once(staff_client):
    invitation = invite(staff_client)
    url = invitation.get_absolute_url()
    assert Client().get(url).status_code == 200
    response = accept(url, "ada")
    assert response.status_code == 302 and response["Location"] == reverse("experiment-list")
    ada = get_user_model().objects.get(username="ada")
    assert not ada.is_staff and not ada.is_superuser
    invitation.refresh_from_db()
    assert invitation.state == "used" and invitation.used_by == ada

    again = accept(url, "mallory")
    assert again.status_code == 410 and b"This invitation is used" in again.content
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_the_link_is_shown_to_staff_with_its_state(staff_client):
    invitation = invite(staff_client)
    page = staff_client.get(reverse("user-list"))
    assert invitation.get_absolute_url().encode() in page.content
    assert b'status-open">open' in page.content and b"for Ada" in page.content
    accept(invitation.get_absolute_url(), "ada")
    page = staff_client.get(reverse("user-list"))
    assert invitation.get_absolute_url().encode() not in page.content
    assert b'status-used">used</span> by ada' in page.content


def test_an_expired_invitation_is_refused(staff_client):
    invitation = invite(staff_client)
    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = accept(invitation.get_absolute_url(), "late")
    assert response.status_code == 410 and b"expired" in response.content
    assert not get_user_model().objects.filter(username="late").exists()


def test_a_revoked_invitation_is_refused(staff_client):
    invitation = invite(staff_client)
    assert staff_client.post(reverse("invitation-revoke", args=[invitation.pk])).status_code == 302
    assert accept(invitation.get_absolute_url(), "someone").status_code == 410
    assert not get_user_model().objects.filter(username="someone").exists()


@pytest.mark.parametrize("token", ["1", "garbage", "MQ:1tAmpered:signature"])
def test_a_forged_or_guessed_link_is_not_found(staff_client, token):
    invite(staff_client)
    assert Client().get(reverse("invitation-accept", args=[token])).status_code == 404


def test_another_invitations_signature_does_not_open_this_one(staff_client):
    first, second = invite(staff_client, "a"), invite(staff_client, "b")
    signature = first.token.rsplit(":", 1)[1]
    forged = f"{second.token.rsplit(':', 1)[0]}:{signature}"
    assert Client().get(reverse("invitation-accept", args=[forged])).status_code == 404


def test_ordinary_users_cannot_invite(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("ordinary", password=PASSWORD))
    assert client.post(reverse("invitation-create"), {"note": "x", "days": "7"}).status_code == 404
    assert not Invitation.objects.exists()


def test_a_bad_expiry_is_refused_next_to_the_field(staff_client):
    response = staff_client.post(reverse("invitation-create"), {"note": "x", "days": "1000"})
    assert response.status_code == 400 and "days" in response.context["invitation_form"].errors
    assert not Invitation.objects.exists()
