"""The API's OpenAPI schema is valid and describes every area; its docs page is public, the data is not."""

from __future__ import annotations

import re

from django.test import Client
from openapi_spec_validator import validate


def test_the_openapi_schema_validates():
    schema = Client().get("/api/openapi.json").json()
    validate(schema)
    paths = set(schema["paths"])
    for path in ("/api/me", "/api/experiments", "/api/runs", "/api/runs/{run_id}/metrics",
                 "/api/runs/{run_id}/events", "/api/checkpoints/{checkpoint_id}/download", "/api/sweeps",
                 "/api/workers", "/api/queues"):
        assert path in paths, path
    assert {"TokenAuth", "SessionAuth"} <= set(schema["components"]["securitySchemes"])


def test_the_docs_page_is_public_and_the_data_is_not():
    assert Client().get("/api/docs").status_code == 200
    assert Client().get("/api/experiments").status_code == 401


def test_the_docs_page_loads_its_scripts_from_the_site_itself():
    """A self-hosted site may reach no CDN (Swagger UI from one left the page blank there)."""
    page = Client().get("/api/docs").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any(source.endswith("swagger-ui-bundle.js") for source in sources), sources
    for source in sources:
        assert source.startswith("/"), f"{source} is not on the site"
        if source.endswith((".js", ".css")):
            assert Client().get(source).status_code == 200, source
