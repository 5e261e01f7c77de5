"""Request bodies bounded before Django reads them. Django's ASGI handler reads a whole body (spooled to a temporary
file past FILE_UPLOAD_MAX_MEMORY_SIZE) before any view runs, so a view's own bound came after a 10 GB upload had
filled the disk. This ASGI middleware, around the Django application in rlweb/asgi.py, answers 413 from the
Content-Length at once, or as soon as the bytes of a body sent without one pass the bound of its path: the largest
body that path takes (the views keep their exact bounds and messages below it).
"""

from __future__ import annotations

import html
import json
import re

from django.conf import settings

MEGABYTE = 2**20  # storage_use.MEGABYTE, which this module cannot import: it loads before Django's models
FORM_SLACK = 64 * 1024  # a form's other fields and multipart boundaries beside its file

# (path, the setting of its largest body in MB): the uploads; every other path takes Django's own bound on a body
UPLOAD_PATHS = [
    (re.compile(r"/api/logged-runs/\d+/files"), "LOGGED_FILE_MAX_MB"),
    (re.compile(r"/api/logged-runs/\d+/points"), "LOGGED_POINTS_MAX_MB"),
    (re.compile(r"/api/logged-runs/import-tensorboard|/runs/import-tensorboard/"), "TENSORBOARD_IMPORT_MAX_MB"),
]


def body_bound(path: str) -> tuple[int, str]:
    """The largest body, in bytes, that a request to `path` may send, and the variable that sets it."""
    for pattern, setting in UPLOAD_PATHS:
        if pattern.fullmatch(path):
            return getattr(settings, setting) * MEGABYTE + FORM_SLACK, f"RLWEB_{setting}"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FORM_SLACK, "Django's DATA_UPLOAD_MAX_MEMORY_SIZE"


class BodyTooLarge(Exception):
    pass


def too_large_detail(bound: int, setting: str) -> str:
    return (f"The request's body is larger than this address takes ({bound / MEGABYTE:,.1f} MB, set by {setting}): "
            "send less.")


def too_large_page(detail: str, path: str) -> bytes:
    """What a browser shows for a form posted too large (the TensorBoard import page): the reason, and a way back."""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Too large</title></head><body>'
            f'<h1>Too large</h1><p id="too-large">{html.escape(detail)}</p>'
            f'<p><a href="{html.escape(path)}">Back to the form</a></p></body></html>').encode()


class BodyLimit:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        bound, setting = body_bound(scope["path"])
        headers = dict(scope.get("headers") or [])
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            length = 0
        wants_page = not scope["path"].startswith("/api/") and b"text/html" in headers.get(b"accept", b"")
        if length > bound:
            return await refuse(send, too_large_detail(bound, setting), scope["path"] if wants_page else None)
        received = 0

        async def bounded_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > bound:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, bounded_receive, send)
        except BodyTooLarge:  # raised while Django read the body, before it answered
            await refuse(send, too_large_detail(bound, setting), scope["path"] if wants_page else None)


async def refuse(send, detail: str, page: str | None) -> None:
    """413 with `detail`: as JSON, or as a page with a link back to `page` (a browser's form)."""
    body, kind = (too_large_page(detail, page), b"text/html; charset=utf-8") if page else \
        (json.dumps({"detail": detail}).encode(), b"application/json")
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
