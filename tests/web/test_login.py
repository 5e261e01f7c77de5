"""Signing in and out, and the rule that every page needs a signed-in user."""

import pytest
from django.urls import reverse

from tests.web.helpers import PASSWORD


def test_a_user_signs_in_with_their_password(client, owner):
    response = client.post(reverse("login"), {"username": "owner", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == reverse("experiment-list")
    assert client.get(reverse("experiment-list")).status_code == 200


def test_a_wrong_password_is_refused(client, owner):
    response = client.post(reverse("login"), {"username": "owner", "password": "wrong"})
    assert response.status_code == 200
    assert response.context["form"].errors
    assert client.get(reverse("experiment-list")).status_code == 302


def test_the_login_page_offers_sign_up(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert reverse("signup").encode() in response.content


def test_logging_out_takes_a_post_and_ends_the_session(owner_client):
    response = owner_client.post(reverse("logout"))
    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert owner_client.get(reverse("experiment-list")).status_code == 302


@pytest.mark.parametrize("name, args", [
    ("experiment-list", []), ("experiment-new", []), ("experiment-detail", [1]), ("run-detail", [1]),
    ("run-events", [1]), ("run-stream", [1]), ("checkpoint-download", [1]),
])
def test_every_page_sends_visitors_to_the_login_page(client, db, name, args):
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_cancel_needs_a_signed_in_user(client, queued_run):
    response = client.post(reverse("run-cancel", args=[queued_run.pk]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    queued_run.refresh_from_db()
    assert queued_run.status == "queued"


def test_csrf_protection_is_on(owner):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(reverse("experiment-new"), {}).status_code == 403
