"""Bodies bounded before Django reads them (rlweb/body_limit.py, around the application in rlweb/asgi.py): 413 from
a Content-Length over the path's bound at once, or as soon as a body sent without one passes it; nothing is
stored, and a body within the bound reaches the view."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator

from rlweb.asgi import application
from rlweb.body_limit import FORM_SLACK, MEGABYTE, body_bound

pytestmark = pytest.mark.django_db(transaction=True)


def request(path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 1), "server": ("testserver", 80)}


async def answer(communicator) -> tuple[int, bytes]:
    start = await communicator.receive_output(timeout=10)
    body = await communicator.receive_output(timeout=10)
    return start["status"], body.get("body", b"")


def test_each_upload_path_has_the_bound_of_its_setting(settings):
    settings.LOGGED_FILE_MAX_MB, settings.TENSORBOARD_IMPORT_MAX_MB, settings.LOGGED_POINTS_MAX_MB = 7, 3, 2
    assert body_bound("/api/logged-runs/12/files") == (7 * MEGABYTE + FORM_SLACK, "RLWEB_LOGGED_FILE_MAX_MB")
    assert body_bound("/runs/import-tensorboard/")[0] == body_bound("/api/logged-runs/import-tensorboard")[0] == \
        3 * MEGABYTE + FORM_SLACK
    assert body_bound("/api/logged-runs/12/points")[0] == 2 * MEGABYTE + FORM_SLACK
    assert body_bound("/api/logged-runs/12/files/extra")[0] == settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FORM_SLACK
    assert body_bound("/experiments/new/")[0] == settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FORM_SLACK


def test_a_content_length_over_the_bound_is_refused_before_a_byte_is_read(settings):
    async_to_sync(_a_content_length_over_the_bound_is_refused_before_a_byte_is_read)(settings)


async def _a_content_length_over_the_bound_is_refused_before_a_byte_is_read(settings):
    settings.TENSORBOARD_IMPORT_MAX_MB = 1
    communicator = ApplicationCommunicator(application, request(
        "/runs/import-tensorboard/", [(b"content-length", str(10 * 2**30).encode())]))
    await communicator.send_input({"type": "http.request", "body": b"x" * 1000, "more_body": True})
    status, body = await answer(communicator)
    assert status == 413 and b"RLWEB_TENSORBOARD_IMPORT_MAX_MB" in body


def test_a_body_without_a_length_is_cut_off_once_it_passes_the_bound(settings):
    async_to_sync(_a_body_without_a_length_is_cut_off_once_it_passes_the_bound)(settings)


async def _a_body_without_a_length_is_cut_off_once_it_passes_the_bound(settings):
    settings.LOGGED_POINTS_MAX_MB = 1
    communicator = ApplicationCommunicator(application, request("/api/logged-runs/1/points", []))
    chunk = b"x" * (256 * 1024)
    for _ in range(5):  # 1.25 MB: past 1 MB and the slack, and more was coming
        await communicator.send_input({"type": "http.request", "body": chunk, "more_body": True})
    status, body = await answer(communicator)
    assert status == 413 and b"RLWEB_LOGGED_POINTS_MAX_MB" in body


def test_a_body_within_the_bound_reaches_django():
    async_to_sync(_a_body_within_the_bound_reaches_django)()


async def _a_body_within_the_bound_reaches_django():
    communicator = ApplicationCommunicator(application, request(
        "/api/logged-runs/1/points", [(b"content-type", b"application/json"), (b"content-length", b"13")]))
    await communicator.send_input({"type": "http.request", "body": b'{"points":[]}', "more_body": False})
    status, _ = await answer(communicator)
    assert status == 403  # Django's answer: no token, so a session request without its CSRF token
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=10)


def test_a_browsers_form_posted_too_large_gets_a_page_that_says_why_with_a_way_back(settings):
    async_to_sync(_a_browsers_form_posted_too_large)(settings)


async def _a_browsers_form_posted_too_large(settings):
    settings.TENSORBOARD_IMPORT_MAX_MB = 1
    communicator = ApplicationCommunicator(application, request("/runs/import-tensorboard/", [
        (b"accept", b"text/html,application/xhtml+xml"), (b"content-length", str(50 * 2**20).encode())]))
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": True})
    start = await communicator.receive_output(timeout=10)
    body = (await communicator.receive_output(timeout=10))["body"].decode()
    assert start["status"] == 413 and (b"content-type", b"text/html; charset=utf-8") in start["headers"]
    assert "RLWEB_TENSORBOARD_IMPORT_MAX_MB" in body
    assert '<a href="/runs/import-tensorboard/">Back to the form</a>' in body
