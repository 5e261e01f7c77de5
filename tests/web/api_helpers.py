"""What the API tests share: a client that sends a bearer token, and tokens for the owner and the stranger."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from rlweb.api.models import ApiToken


class TokenClient(Client):
    """A client that sends `Authorization: Bearer <text>` and JSON bodies, with no cookie and no CSRF token."""

    def __init__(self, text: str):
        super().__init__(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {text}")
        self.text = text

    def post_json(self, path: str, body, **extra):
        return self.post(path, json.dumps(body) if not isinstance(body, (str, bytes)) else body,
                         content_type="application/json", **extra)


@pytest.fixture
def owner_api(owner) -> TokenClient:
    return TokenClient(ApiToken.issue(owner, "tests")[1])


@pytest.fixture
def stranger_api(stranger) -> TokenClient:
    return TokenClient(ApiToken.issue(stranger, "tests")[1])
