"""The client's tests import `rlweb_client` from client/ (installed or not), and get a protocol server each."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.client.protocol_server import ProtocolServer

CLIENT = Path(__file__).resolve().parents[2] / "client"
if str(CLIENT) not in sys.path:
    sys.path.insert(0, str(CLIENT))


@pytest.fixture
def server():
    running = ProtocolServer().start()
    yield running
    running.stop()


@pytest.fixture
def start_run(server, tmp_path):
    """`start_run(**options)`: a run on the test server with short delays, its offline folder in tmp_path."""
    import rlweb_client

    runs = []

    def start(**options):
        settings = {"experiment": "ppo-cartpole", "config": {"learning_rate": 0.00025},
                    "offline_dir": str(tmp_path / "offline"), "retry_delay": 0.05, "max_retry_delay": 0.4,
                    "flush_interval": 0.05, "system_metrics": 0, **options}  # samples: test_system.py
        run = rlweb_client.init(settings.pop("url", server.url), settings.pop("token", server.token), **settings)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.finish(timeout=5)
