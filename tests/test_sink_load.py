"""The sink load benchmark in small (benchmarks/sink_load.py): two processes report events through RedisSink into a
Redis of the test's own and a fresh PostgreSQL database; every emitted event is stored and the figures print."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from tests.conftest import RedisServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POSTGRES = "postgres://postgres@127.0.0.1:5432"

pytestmark = pytest.mark.slow


def test_every_emitted_event_is_stored_and_the_figures_are_printed():
    if not shutil.which("createdb") or subprocess.run(["pg_isready", "-h", "127.0.0.1"]).returncode:
        pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    name = f"rlweb_sink_load_{uuid.uuid4().hex[:8]}"
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", name], check=True)
    redis_server = RedisServer().start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "sink_load", "--workers", "2", "--events-per-second", "20",
             "--seconds", "3", "--database-url", f"{POSTGRES}/{name}", "--redis-url", redis_server.url],
            cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        redis_server.remove()
        subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", name])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    emitted = int(re.search(r"emitted (\d+) events", done.stdout).group(1))
    assert emitted > 80
    assert f"stored {emitted + 4} rows (+0 against emitted" in done.stdout  # with each run's started and finished
    assert re.search(r"lag from emit to stored: p50 \d+ ms, p95 \d+ ms", done.stdout)
    assert "GB per million events" in done.stdout and "Redis used_memory" in done.stdout
