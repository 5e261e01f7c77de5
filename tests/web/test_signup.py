"""The sign-up page: the first user of a fresh install gets in from the browser; after that sign-up is
closed unless an admin opens it on the Users page, or RLWEB_ALLOW_SIGNUP forces it."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests.web.helpers import PASSWORD


def signup(client, username):
    return client.post(reverse("signup"), {"username": username, "password1": PASSWORD, "password2": PASSWORD})


@pytest.fixture
def admin_client(client):
    assert signup(client, "first").status_code == 302
    return client


def test_the_sign_up_page_is_open_to_visitors_of_a_fresh_install(client):
    response = client.get(reverse("signup"))
    assert response.status_code == 200
    assert b'name="username"' in response.content and b'name="password1"' in response.content


def test_the_first_account_is_signed_in_and_administers_the_site(client):
    response = signup(client, "first")
    assert response.status_code == 302 and response["Location"] == reverse("experiment-list")
    user = get_user_model().objects.get(username="first")
    assert user.is_superuser and user.is_staff
    assert client.get(reverse("experiment-list")).status_code == 200


def test_after_the_first_account_sign_up_is_closed(admin_client):
    visitor = Client()
    response = signup(visitor, "second")
    assert response.status_code == 403 and b"Sign-up is closed" in response.content
    assert visitor.get(reverse("signup")).status_code == 403
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["first"]
    assert b"Create an account" not in visitor.get(reverse("login")).content


def test_the_admin_opens_and_closes_sign_up_from_the_users_page(admin_client):
    assert admin_client.post(reverse("signup-switch"), {"open": "True"}).status_code == 302
    assert reverse("signup").encode() in Client().get(reverse("login")).content
    assert signup(Client(), "second").status_code == 302
    second = get_user_model().objects.get(username="second")
    assert not second.is_superuser and not second.is_staff  # later accounts are ordinary users

    admin_client.post(reverse("signup-switch"), {"open": "False"})
    assert signup(Client(), "third").status_code == 403
    assert not get_user_model().objects.filter(username="third").exists()


def test_an_ordinary_user_cannot_open_sign_up(admin_client, settings):
    settings.ALLOW_SIGNUP = True
    signup(Client(), "second")
    settings.ALLOW_SIGNUP = None
    ordinary = Client()
    ordinary.force_login(get_user_model().objects.get(username="second"))
    assert ordinary.post(reverse("signup-switch"), {"open": "True"}).status_code == 404
    assert signup(Client(), "third").status_code == 403


def test_it_rejects_mismatched_passwords_next_to_the_field(client):
    response = client.post(reverse("signup"), {"username": "someone", "password1": PASSWORD, "password2": "other"})
    assert response.status_code == 200
    assert "password2" in response.context["form"].errors
    assert b'id="id_password2_error"' in response.content
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_rlweb_allow_signup_false_closes_it_even_on_a_fresh_install(client, settings):
    settings.ALLOW_SIGNUP = False
    assert client.get(reverse("signup")).status_code == 403
    assert signup(client, "first").status_code == 403
    assert not get_user_model().objects.exists()
    assert b"Create an account" not in client.get(reverse("login")).content


def test_rlweb_allow_signup_true_keeps_it_open_and_the_switch_says_so(admin_client, settings):
    settings.ALLOW_SIGNUP = True
    assert signup(Client(), "second").status_code == 302
    page = admin_client.get(reverse("user-list"))
    assert b"RLWEB_ALLOW_SIGNUP" in page.content and reverse("signup-switch").encode() not in page.content
    admin_client.post(reverse("signup-switch"), {"open": "False"})
    assert signup(Client(), "third").status_code == 302
