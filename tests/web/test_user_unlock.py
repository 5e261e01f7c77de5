"""Clearing a user's failed sign-ins: the Users page's Clear button (staff only) and
`manage.py clear_sign_in_failures`, so that no delay holds them back."""

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from rlweb.accounts.models import LoginFailure
from tests.web.helpers import PASSWORD

ATTACKER = "203.0.113.7"


@pytest.fixture
def staff_client(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client


def fail_sign_ins(username: str, ip: str, times: int):
    client = Client(REMOTE_ADDR=ip)
    for _ in range(times):
        client.post(reverse("login"), {"username": username, "password": "wrong"})


def signs_in(username: str, ip: str) -> bool:
    response = Client(REMOTE_ADDR=ip).post(reverse("login"), {"username": username, "password": PASSWORD})
    return response.status_code == 302


def test_staff_clear_a_users_failed_sign_ins_and_they_sign_in_at_once(staff_client, owner, stranger, settings):
    fail_sign_ins("owner", ATTACKER, settings.LOGIN_FAILURE_LIMIT)
    fail_sign_ins("stranger", ATTACKER, 1)
    assert not signs_in("owner", ATTACKER)
    page = staff_client.get(reverse("user-list"))
    counts = {account.username: account.failed_sign_ins for account in page.context["users"]}
    assert counts == {"admin": 0, "owner": settings.LOGIN_FAILURE_LIMIT, "stranger": 1}
    assert reverse("user-unlock", args=[owner.pk]).encode() in page.content
    assert reverse("user-unlock", args=[stranger.pk]).encode() in page.content

    response = staff_client.post(reverse("user-unlock", args=[owner.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("user-list")
    assert list(LoginFailure.objects.values_list("username", flat=True)) == ["stranger"]  # only owner's went
    assert signs_in("owner", ATTACKER)


def test_other_users_get_a_404_and_nothing_is_cleared(owner_client, stranger, settings):
    fail_sign_ins("stranger", ATTACKER, settings.LOGIN_FAILURE_LIMIT)
    assert owner_client.post(reverse("user-unlock", args=[stranger.pk])).status_code == 404
    assert LoginFailure.objects.count() == settings.LOGIN_FAILURE_LIMIT


def test_clearing_needs_a_post(staff_client, owner):
    fail_sign_ins("owner", ATTACKER, 1)
    assert staff_client.get(reverse("user-unlock", args=[owner.pk])).status_code == 405
    assert LoginFailure.objects.count() == 1


def test_an_unknown_user_is_a_404(staff_client):
    assert staff_client.post(reverse("user-unlock", args=[999999])).status_code == 404


def test_the_command_clears_a_username_or_an_address(owner, settings):
    fail_sign_ins("owner", ATTACKER, 2)
    fail_sign_ins("owner", "198.51.100.1", 2)
    fail_sign_ins("nobody", ATTACKER, 2)
    call_command("clear_sign_in_failures", "OWNER", "--address", ATTACKER)
    assert sorted(LoginFailure.objects.values_list("username", "ip")) == [
        ("nobody", ATTACKER), ("nobody", ATTACKER), ("owner", "198.51.100.1"), ("owner", "198.51.100.1")]
    call_command("clear_sign_in_failures", "--address", ATTACKER)
    assert set(LoginFailure.objects.values_list("ip", flat=True)) == {"198.51.100.1"}
    call_command("clear_sign_in_failures", "owner")
    assert not LoginFailure.objects.exists()
    fail_sign_ins("someone", ATTACKER, 1)
    call_command("clear_sign_in_failures", "--all")
    assert not LoginFailure.objects.exists()
    with pytest.raises(CommandError):
        call_command("clear_sign_in_failures")
