"""Login throttling: refused sign-ins are counted per username and address together, and per address; past
a limit the client waits, a minute first and twice as long after each further refusal, up to a cap. No
client can make another address wait, so hammering a username cannot keep its owner out."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.accounts.models import LoginFailure
from tests.web.helpers import PASSWORD

ATTACKER = "203.0.113.7"
OWN_ADDRESS = "198.51.100.1"


def sign_in(client, username, password):
    return client.post(reverse("login"), {"username": username, "password": password})


def signed_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == reverse("experiment-list")


def from_address(ip: str) -> Client:
    return Client(REMOTE_ADDR=ip)


def refusal(response) -> str:
    assert response.status_code == 200 and not signed_in(response)
    return response.context["form"].non_field_errors()[0]


def age_failures(seconds: float):
    """As if every refused sign-in so far had happened `seconds` earlier."""
    for failure in LoginFailure.objects.all():
        LoginFailure.objects.filter(pk=failure.pk).update(at=failure.at - timedelta(seconds=seconds))


def test_a_username_hammered_from_another_address_still_signs_in_from_its_own(owner, settings):
    attacker = from_address(ATTACKER)
    for _ in range(40):
        assert not signed_in(sign_in(attacker, "owner", "wrong"))
    assert "Too many failed sign-ins" in refusal(sign_in(attacker, "owner", PASSWORD))
    # only the attempts that reached the password were counted, not the ones refused for waiting
    assert LoginFailure.objects.count() == settings.LOGIN_FAILURE_LIMIT
    owner_client = from_address(OWN_ADDRESS)
    assert signed_in(sign_in(owner_client, "owner", PASSWORD))
    assert owner_client.get(reverse("experiment-list")).status_code == 200


def test_the_admin_cannot_be_locked_out_from_another_address(admin_user, settings):
    attacker = from_address(ATTACKER)
    for _ in range(40):
        attacker.post(reverse("admin:login"), {"username": "admin", "password": "wrong"})
    admin = from_address(OWN_ADDRESS)
    response = admin.post(reverse("admin:login"), {"username": "admin", "password": "password"})
    assert response.status_code == 302 and admin.get(reverse("admin:index")).status_code == 200


def test_the_attackers_own_address_waits_even_with_the_right_password(owner, settings):
    attacker = from_address(ATTACKER)
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(attacker, "owner", "wrong")
    response = sign_in(attacker, "owner", PASSWORD)
    assert "try again in 1 minute." in refusal(response)
    assert "try again in 1 minute." in response.content.decode()


def test_the_wait_starts_at_the_limit(owner, settings):
    client = from_address(ATTACKER)
    for _ in range(settings.LOGIN_FAILURE_LIMIT - 1):
        sign_in(client, "owner", "wrong")
    assert signed_in(sign_in(client, "owner", PASSWORD))
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "owner", "wrong")
    assert not signed_in(sign_in(client, "owner", PASSWORD))


def test_the_wait_doubles_with_each_further_failure_up_to_the_cap(owner, settings):
    client = from_address(ATTACKER)
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "owner", "wrong")
    assert "try again in 1 minute." in refusal(sign_in(client, "owner", "wrong"))
    for minutes in (2, 4, 8, 15, 15):
        age_failures(settings.LOGIN_LOCKOUT_MINUTES * 60 + 1)  # every wait so far is over
        # the wrong password is checked and counted, and the next wait is twice as long
        assert f"try again in {minutes} minutes." in refusal(sign_in(client, "owner", "wrong"))
        assert f"try again in {minutes} minutes." in refusal(sign_in(client, "owner", PASSWORD))


def test_after_the_wait_the_right_password_works_and_clears_the_count(owner, settings):
    client = from_address(ATTACKER)
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "owner", "wrong")
    age_failures(settings.LOGIN_FIRST_DELAY_SECONDS - 20)
    message = refusal(sign_in(client, "owner", PASSWORD))
    assert re.search(r"try again in (1\d|20) seconds\.$", message), message
    age_failures(21)
    assert signed_in(sign_in(client, "owner", PASSWORD))
    assert not LoginFailure.objects.exists()


def test_a_sign_in_clears_only_its_own_addresss_failures(owner):
    for ip in (OWN_ADDRESS, ATTACKER):
        for _ in range(2):
            sign_in(from_address(ip), "owner", "wrong")
    assert signed_in(sign_in(from_address(OWN_ADDRESS), "owner", PASSWORD))
    assert set(LoginFailure.objects.values_list("ip", flat=True)) == {ATTACKER}


def test_one_address_trying_many_usernames_waits(owner, stranger, settings):
    settings.LOGIN_FAILURE_LIMIT_PER_IP = 6  # fewer password hashes to wait for than the default 20
    sprayer = from_address(ATTACKER)
    for index in range(settings.LOGIN_FAILURE_LIMIT_PER_IP):
        sign_in(sprayer, f"user{index}", "wrong")  # no username reaches its own limit
    assert "try again in 1 minute." in refusal(sign_in(sprayer, "stranger", PASSWORD))
    assert signed_in(sign_in(from_address(OWN_ADDRESS), "stranger", PASSWORD))
    age_failures(settings.LOGIN_FIRST_DELAY_SECONDS + 1)
    assert "try again in 2 minutes." in refusal(sign_in(sprayer, "user0", "wrong"))


def test_the_addresses_of_one_ipv6_64_network_count_as_one(owner, settings):
    for index in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(from_address(f"2001:db8:1:2::{index + 1:x}"), "owner", "wrong")
    assert not signed_in(sign_in(from_address("2001:db8:1:2:ffff::9"), "owner", PASSWORD))
    assert signed_in(sign_in(from_address("2001:db8:1:3::1"), "owner", PASSWORD))  # the next /64 is elsewhere


def test_the_count_ignores_letter_case(owner, settings):
    client = from_address(ATTACKER)
    for index in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "OWNER" if index % 2 else "owner", "wrong")
    assert not signed_in(sign_in(client, "owner", PASSWORD))


def test_the_message_does_not_tell_whether_the_username_exists(owner, settings):
    messages = []
    for username, ip in (("owner", ATTACKER), ("nobody", "203.0.113.8")):
        client = from_address(ip)
        for _ in range(settings.LOGIN_FAILURE_LIMIT):
            sign_in(client, username, "wrong")
        messages.append(refusal(sign_in(client, username, "wrong")))
    assert messages[0] == messages[1]


def test_the_admin_login_is_throttled_too(admin_user, settings):
    client = from_address(ATTACKER)
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        client.post(reverse("admin:login"), {"username": "admin", "password": "wrong"})
    response = client.post(reverse("admin:login"), {"username": "admin", "password": "password"})
    assert response.status_code == 200  # the form again, not the redirect into the admin
    assert client.get(reverse("admin:index")).status_code == 302


def test_signing_in_still_needs_the_csrf_token(owner):
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR=OWN_ADDRESS)
    assert sign_in(client, "owner", PASSWORD).status_code == 403


@pytest.mark.django_db
def test_failures_older_than_the_window_are_deleted(settings):
    old = LoginFailure.objects.create(username="x", ip="1.2.3.4",
                                      at=timezone.now() - timedelta(hours=settings.LOGIN_FAILURE_HOURS, minutes=1))
    sign_in(Client(), "y", "wrong")
    assert not LoginFailure.objects.filter(pk=old.pk).exists()
    assert list(LoginFailure.objects.values_list("username", "ip")) == [("y", "127.0.0.1")]
