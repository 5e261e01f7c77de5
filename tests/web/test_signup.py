"""The sign-up page: the first user of a fresh install gets in from the browser."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests.web.helpers import PASSWORD


def signup(client, username):
    return client.post(reverse("signup"), {"username": username, "password1": PASSWORD, "password2": PASSWORD})


def test_the_sign_up_page_is_open_to_visitors(client):
    response = client.get(reverse("signup"))
    assert response.status_code == 200
    assert b'name="username"' in response.content and b'name="password1"' in response.content


def test_the_first_account_is_signed_in_and_administers_the_site(client):
    response = signup(client, "first")
    assert response.status_code == 302 and response["Location"] == reverse("experiment-list")
    user = get_user_model().objects.get(username="first")
    assert user.is_superuser and user.is_staff
    assert client.get(reverse("experiment-list")).status_code == 200


def test_later_accounts_are_ordinary_users(client):
    signup(client, "first")
    assert signup(Client(), "second").status_code == 302
    second = get_user_model().objects.get(username="second")
    assert not second.is_superuser and not second.is_staff


def test_it_rejects_mismatched_passwords_next_to_the_field(client):
    response = client.post(reverse("signup"), {"username": "someone", "password1": PASSWORD, "password2": "other"})
    assert response.status_code == 200
    assert "password2" in response.context["form"].errors
    assert b'id="id_password2_error"' in response.content
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_sign_up_can_be_turned_off(client, settings):
    settings.ALLOW_SIGNUP = False
    assert client.get(reverse("signup")).status_code == 404
    assert signup(client, "first").status_code == 404
    assert not get_user_model().objects.exists()
    assert b"Create an account" not in client.get(reverse("login")).content
