"""Request bodies bounded before Django reads them. Django's ASGI handler reads a whole body (spooled to a temporary
file past FILE_UPLOAD_MAX_MEMORY_SIZE) before any view runs, so a view's own bound came after a 10 GB upload had
filled the disk. This ASGI middleware, around the Django application in rlweb/asgi.py, answers 413 from the
Content-Length at once, or as soon as the bytes of a body sent without one pass the bound of its path: the largest
body that path takes (the views keep their exact bounds and messages below it).
"""

from __future__ import annotations

import json
import re

from django.conf import settings

MEGABYTE = 2**20
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


def too_large_text(bound: int, setting: str) -> bytes:
    return json.dumps({"detail": f"The request's body is larger than this address takes ({bound / MEGABYTE:,.1f} MB, "
                                 f"set by {setting}): send less."}).encode()


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
        if length > bound:
            return await refuse(send, bound, setting)
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
            await refuse(send, bound, setting)


async def refuse(send, bound: int, setting: str) -> None:
    body = too_large_text(bound, setting)
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
