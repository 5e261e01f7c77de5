"""The JSON API under /api/ (django-ninja): its schema at /api/openapi.json, its docs page at /api/docs (public:
the page describes the API; every endpoint needs a token or a signed-in session). Each area is a module with its
own Router, added here. Errors are `{"detail": ...}` with a 4xx: 422 lists the fields that do not fit
(`{"detail": [{"loc": [...], "msg": ...}]}`), 413 a body over Django's DATA_UPLOAD_MAX_MEMORY_SIZE."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.urls import URLPattern, URLResolver
from ninja import NinjaAPI, Schema
from ninja.parser import Parser

from rlweb.api.auth import TokenAuth, django_auth
from rlweb.api.throttle import TokenRateThrottle
from rlweb.experiments.rows import json_loads


class FastParser(Parser):
    """Bodies decoded by orjson where it can (a script's batch of points: a tenth of a points request's CPU), by
    json.loads otherwise, so NaN and Infinity still arrive to be dropped with a note."""

    def parse_body(self, request):
        return json_loads(request.body)


api = NinjaAPI(title="rlweb API", version="1", auth=[TokenAuth(), django_auth], throttle=TokenRateThrottle(),
               parser=FastParser(),
               description="Everything the pages do, from code. Authenticate with `Authorization: Bearer <token>` "
                           "(make one on your Tokens page, or `manage.py apitoken USERNAME NAME`).")


@api.exception_handler(PermissionDenied)
def not_allowed(request, error):  # a project's viewer acting on what it shows them (rlweb/projects/access.py)
    return api.create_response(request, {"detail": str(error) or "Not allowed."}, status=403)


@api.exception_handler(RequestDataTooBig)
def body_too_big(request, error):
    return api.create_response(request, {"detail": "The request body is too large."}, status=413)


class Me(Schema):
    id: int
    username: str
    token: str | None  # the name of the token the request came with; None for a browser session


@api.get("/me", response=Me, tags=["account"])
def me(request):
    """Who the request is authenticated as."""
    token = getattr(request, "api_token", None)
    return {"id": request.auth.pk, "username": request.auth.get_username(), "token": token.name if token else None}


api.add_router("/", "rlweb.api.experiments.router")
api.add_router("/", "rlweb.api.runs.router")
api.add_router("/", "rlweb.api.sweeps.router")
api.add_router("/", "rlweb.api.suites.router")
api.add_router("/", "rlweb.api.workers.router")
api.add_router("/logged-runs", "rlweb.api.logged_runs.router")
api.add_router("/", "rlweb.api.projects.router")
api.add_router("/", "rlweb.api.statistics.router")


def urls():
    """The API's URL patterns, exempt from the site's LoginRequiredMiddleware: the API answers 401 itself."""
    patterns, app_name, namespace = api.urls
    exempt(patterns)
    return patterns, app_name, namespace


def exempt(patterns) -> None:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            exempt(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            login_not_required(pattern.callback)
