"""The staff-only Users page: accounts with their activity, and creating a user directly."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests.web.helpers import PASSWORD


@pytest.fixture
def staff_client(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client


def test_staff_see_every_account_and_a_link_in_the_header(staff_client, owner, queued_run):
    page = staff_client.get(reverse("user-list"))
    assert page.status_code == 200
    accounts = {account.username: account for account in page.context["users"]}
    assert set(accounts) == {"admin", "owner"}
    assert accounts["owner"].experiment_count == 1 and accounts["owner"].active_runs == 1
    assert f'href="{reverse("user-list")}"'.encode() in page.content


def test_staff_create_a_user_who_can_then_sign_in(staff_client):
    response = staff_client.post(reverse("user-create"), {"new-username": "grace", "new-password1": PASSWORD,
                                                          "new-password2": PASSWORD})
    assert response.status_code == 302
    grace = get_user_model().objects.get(username="grace")
    assert not grace.is_staff
    assert Client().login(username="grace", password=PASSWORD)


def test_a_bad_new_user_is_refused_next_to_the_field(staff_client):
    response = staff_client.post(reverse("user-create"), {"new-username": "grace", "new-password1": "short",
                                                          "new-password2": "short"})
    assert response.status_code == 400 and b'id="id_new-password2_error"' in response.content
    assert not get_user_model().objects.filter(username="grace").exists()


def test_ordinary_users_get_a_404_and_no_header_link(owner_client):
    assert owner_client.get(reverse("user-list")).status_code == 404
    assert owner_client.post(reverse("user-create"), {"new-username": "x", "new-password1": PASSWORD,
                                                      "new-password2": PASSWORD}).status_code == 404
    assert not get_user_model().objects.filter(username="x").exists()
    assert reverse("user-list").encode() not in owner_client.get(reverse("experiment-list")).content
