"""The load benchmark in small (benchmarks/load.py): the real stack with two workers training two runs at
once, live pages following them (one drops its connection and resumes with Last-Event-ID), then a cancel.
Every page must end up with every event the run produced, each stored once, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.stack import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_every_live_page_receives_every_stored_event_while_runs_train_side_by_side(tmp_path):
    figures = tmp_path / "load.json"
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "load", "--runs", "2", "--clients", "6", "--seconds", "10",
         "--sample-every", "2", "--json", str(figures)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(figures.read_text())

    assert summary["died"] == [] and summary["cancel_errors"] == []
    for run in summary["runs"].values():
        assert run["status"] == "cancelled"
        assert run["produced"] > 10 and run["stored"] == run["produced"]
    assert {client["run"] for client in summary["clients"]} == {int(run_id) for run_id in summary["runs"]}
    for client in summary["clients"]:
        produced = summary["runs"][str(client["run"])]["produced"]
        assert client["errors"] == [] and client["duplicates"] == 0
        assert client["history_seq"] + client["streamed"] == client["last_seq"] == produced
        assert client["connections"] == 1 + client["planned_drops"]
        assert client["end"] == "cancelled"
    assert sum(client["planned_drops"] for client in summary["clients"]) >= 3
    assert summary["ok"], done.stdout[-3000:]
