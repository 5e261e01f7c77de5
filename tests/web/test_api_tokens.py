"""API tokens: how a request authenticates (bearer token or session), the CSRF rules, the rate limit, the Tokens
page and `manage.py apitoken`."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta

from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.api.models import ApiToken
from tests.web.api_helpers import TokenClient, owner_api  # noqa: F401  (fixtures)


def test_a_token_authenticates_its_user(owner, owner_api):
    response = owner_api.get("/api/me")
    assert response.status_code == 200
    assert response.json() == {"id": owner.pk, "username": "owner", "token": "tests"}


def test_a_signed_in_session_authenticates_too(owner, owner_client):
    assert owner_client.get("/api/me").json() == {"id": owner.pk, "username": "owner", "token": None}


def test_no_credentials_get_401_not_a_login_redirect():
    response = Client().get("/api/me")
    assert response.status_code == 401
    assert response.json() == {"detail": "Unauthorized"}


def test_an_unknown_token_gets_401(owner):
    token, text = ApiToken.issue(owner, "real")
    for wrong in ("rlw_nothing_here", "garbage", text[:-1] + ("A" if text[-1] != "A" else "B"),
                  f"rlw_{token.prefix}_"):
        assert TokenClient(wrong).get("/api/me").status_code == 401, wrong


def test_a_revoked_token_gets_401(owner):
    token, text = ApiToken.issue(owner, "old")
    token.revoked_at = timezone.now()
    token.save()
    response = TokenClient(text).get("/api/me")
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_an_expired_token_gets_401_and_one_not_yet_expired_works(owner):
    expired, expired_text = ApiToken.issue(owner, "old", expires_at=timezone.now() - timedelta(seconds=1))
    _, fresh_text = ApiToken.issue(owner, "new", expires_at=timezone.now() + timedelta(days=1))
    response = TokenClient(expired_text).get("/api/me")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]
    assert TokenClient(fresh_text).get("/api/me").status_code == 200


def test_a_bad_token_does_not_fall_back_to_the_session(owner, owner_client):
    response = owner_client.get("/api/me", HTTP_AUTHORIZATION="Bearer rlw_0000000000_nope")
    assert response.status_code == 401


def test_last_used_is_written_at_most_once_a_minute(owner):
    token, text = ApiToken.issue(owner, "t")
    client = TokenClient(text)
    client.get("/api/me")
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    client.get("/api/me")
    token.refresh_from_db()
    assert token.last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    client.get("/api/me")
    token.refresh_from_db()
    assert token.last_used_at > first


def test_a_session_post_without_the_csrf_token_is_refused(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post("/api/experiments/0/cancel")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_a_session_post_with_the_csrf_token_passes_the_check(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    client.get(reverse("token-list"))  # sets the CSRF cookie
    response = client.post("/api/experiments/0/cancel", HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)
    assert response.status_code == 404  # past authentication: no such experiment


def test_a_token_post_needs_no_csrf_token(owner_api):
    response = owner_api.post("/api/experiments/0/cancel")
    assert response.status_code == 404


def test_requests_past_the_rate_limit_get_429_with_retry_after(owner_api, settings, owner):
    settings.API_RATE_PER_MINUTE = 3
    statuses = [owner_api.get("/api/me").status_code for _ in range(4)]
    assert statuses[:3] == [200, 200, 200]
    assert statuses[3] == 429
    response = owner_api.get("/api/me")
    assert 1 <= int(response["Retry-After"]) <= 60
    _, other = ApiToken.issue(owner, "another")  # the limit is per token
    assert TokenClient(other).get("/api/me").status_code == 200


def test_a_body_over_the_bound_gets_413(owner_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = owner_api.post_json("/api/experiments", {"algorithm": "dqn", "env_id": "x" * 2000})
    assert response.status_code == 413


def test_the_tokens_page_shows_a_new_token_once_and_stores_only_its_hash(owner, owner_client):
    response = owner_client.post(reverse("token-list"), {"name": "laptop", "days": "30"})
    assert response.status_code == 200
    text = response.context["new_text"]
    assert text in response.content.decode()
    token = ApiToken.objects.get(user=owner)
    assert token.name == "laptop"
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    secret = text.split("_", 2)[2]
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(list(ApiToken.objects.values()), default=str)
    page = owner_client.get(reverse("token-list")).content.decode()
    assert "laptop" in page and text not in page
    assert TokenClient(text).get("/api/me").status_code == 200


def test_the_tokens_page_revokes_a_token(owner, owner_client):
    token, text = ApiToken.issue(owner, "laptop")
    response = owner_client.post(reverse("token-revoke", args=[token.pk]))
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert TokenClient(text).get("/api/me").status_code == 401


def test_a_stranger_cannot_revoke_or_see_anothers_token(owner, stranger_client):
    token, _ = ApiToken.issue(owner, "owner's own laptop")
    assert stranger_client.post(reverse("token-revoke", args=[token.pk])).status_code == 404
    assert "owner&#x27;s own laptop" not in stranger_client.get(reverse("token-list")).content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_header_links_to_the_tokens_page(owner_client):
    assert f'href="{reverse("token-list")}"' in owner_client.get(reverse("experiment-list")).content.decode()


def test_the_apitoken_command_prints_a_working_token(owner):
    out = io.StringIO()
    call_command("apitoken", "owner", "ci", "--days", "7", stdout=out)
    text = out.getvalue().strip()
    token = ApiToken.objects.get(user=owner, name="ci")
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert TokenClient(text).get("/api/me").json()["token"] == "ci"


def test_the_apitoken_command_refuses_an_unknown_user(db):
    import pytest
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="No user"):
        call_command("apitoken", "nobody", "ci")
