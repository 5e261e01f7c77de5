"""Login throttling: too many refused sign-ins lock the username and the client address for a while, even
with the right password; the counts live in the database, so every web process shares them."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.accounts.models import LoginFailure
from tests.web.helpers import PASSWORD


def sign_in(client, username, password):
    return client.post(reverse("login"), {"username": username, "password": password})


def signed_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == reverse("experiment-list")


def from_address(ip: str) -> Client:
    return Client(REMOTE_ADDR=ip)


def test_forty_wrong_passwords_then_the_right_one_is_refused(owner):
    attacker = from_address("203.0.113.7")
    for _ in range(40):
        assert not signed_in(sign_in(attacker, "owner", "wrong"))
    response = sign_in(attacker, "owner", PASSWORD)
    assert response.status_code == 200 and not signed_in(response)
    assert "Too many failed sign-ins" in response.context["form"].non_field_errors()[0]
    assert "try again in 15 minutes" in response.content.decode()
    # the username is locked from any address, not only the attacker's
    assert not signed_in(sign_in(from_address("198.51.100.1"), "owner", PASSWORD))


def test_the_lock_starts_at_the_limit(owner, settings):
    client = from_address("203.0.113.7")
    for _ in range(settings.LOGIN_FAILURE_LIMIT - 1):
        sign_in(client, "owner", "wrong")
    assert signed_in(sign_in(client, "owner", PASSWORD))
    LoginFailure.objects.all().delete()
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "owner", "wrong")
    assert not signed_in(sign_in(client, "owner", PASSWORD))


def test_another_user_from_another_address_is_not_affected(owner, stranger):
    attacker = from_address("203.0.113.7")
    for _ in range(40):
        sign_in(attacker, "owner", "wrong")
    assert signed_in(sign_in(from_address("198.51.100.1"), "stranger", PASSWORD))


def test_one_address_trying_many_usernames_is_locked(owner, stranger, settings):
    settings.LOGIN_FAILURE_LIMIT_PER_IP = 6  # fewer password hashes to wait for than the default 20
    sprayer = from_address("203.0.113.7")
    for index in range(settings.LOGIN_FAILURE_LIMIT_PER_IP):
        sign_in(sprayer, f"user{index}", "wrong")  # no username reaches its own limit
    assert not signed_in(sign_in(sprayer, "stranger", PASSWORD))
    assert signed_in(sign_in(from_address("198.51.100.1"), "stranger", PASSWORD))


def test_after_the_lock_expires_the_right_password_works(owner, settings):
    client = from_address("203.0.113.7")
    for _ in range(40):
        sign_in(client, "owner", "wrong")
    assert not signed_in(sign_in(client, "owner", PASSWORD))
    almost = timedelta(minutes=settings.LOGIN_LOCKOUT_MINUTES) - timedelta(seconds=30)
    LoginFailure.objects.update(at=timezone.now() - almost)  # every failure is still inside the window
    response = sign_in(client, "owner", PASSWORD)
    assert not signed_in(response) and "try again in 1 minute." in response.content.decode()
    LoginFailure.objects.update(at=timezone.now() - timedelta(minutes=settings.LOGIN_LOCKOUT_MINUTES, seconds=1))
    assert signed_in(sign_in(client, "owner", PASSWORD))


def test_the_username_lock_ignores_letter_case(owner, settings):
    client = from_address("203.0.113.7")
    for index in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "OWNER" if index % 2 else "owner", "wrong")
    assert not signed_in(sign_in(from_address("198.51.100.1"), "owner", PASSWORD))


def test_the_admin_login_is_throttled_too(admin_user, settings):
    client = from_address("203.0.113.7")
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        client.post(reverse("admin:login"), {"username": "admin", "password": "wrong"})
    response = client.post(reverse("admin:login"), {"username": "admin", "password": "password"})
    assert response.status_code == 200  # the form again, not the redirect into the admin
    assert client.get(reverse("admin:index")).status_code == 302


@pytest.mark.django_db
def test_failures_older_than_the_window_are_deleted(settings):
    old = LoginFailure.objects.create(username="x", ip="1.2.3.4",
                                      at=timezone.now() - timedelta(minutes=settings.LOGIN_LOCKOUT_MINUTES + 1))
    sign_in(Client(), "y", "wrong")
    assert not LoginFailure.objects.filter(pk=old.pk).exists()
    assert list(LoginFailure.objects.values_list("username", "ip")) == [("y", "127.0.0.1")]
