"""rlweb_client's `init(resume=..., from_step=...)` against the real server: a script that saves a checkpoint every
500 steps is killed (SIGKILL, as a preempted job is) at step 1,200 and started again. It goes on from its step-1,000
checkpoint in the same run, and the run holds every step once; `resume="auto"` finds the run by itself, and a run
resumed while the server is out of reach is uploaded by `sync` into the same run. A finished run is not resumed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Checkpoint, Event, Run

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread reads what the test wrote

CLIENT = Path(__file__).resolve().parents[2] / "client"
SCRIPT = '''
import argparse, json, os, signal, time
import rlweb_client

parser = argparse.ArgumentParser()
parser.add_argument("--total-timesteps", type=int, default=2000)
parser.add_argument("--kill-at", type=int, default=None)
parser.add_argument("--resume", default="auto")
args = parser.parse_args()
config = {"total_timesteps": args.total_timesteps, "learning_rate": 0.01}

start = json.load(open("agent.json"))["step"] if os.path.exists("agent.json") else 0
run = rlweb_client.init(experiment="preemptible", config=config, offline_dir="offline", resume=args.resume,
                        from_step=start)
for step in range(start, args.total_timesteps):
    if step == args.kill_at:
        while run.pending:  # what was logged reached the server (else the points since the last send are lost)
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    if step % 50 == 49:
        run.log({"charts/value": float(step), "charts/attempt": float(start)}, step=step)
    if step % 500 == 499:
        with open("agent.json", "w") as checkpoint:
            json.dump({"step": step + 1}, checkpoint)
        run.log_checkpoint("agent.json", step=step + 1)
        while run.pending:  # the upload reads the file: keep it until sent
            time.sleep(0.05)
run.finish()
print(json.dumps({"id": run.id, "url": run.url}))
'''


def script(folder: Path, url: str, token: str, *options: str) -> subprocess.CompletedProcess:
    (folder / "train.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, "train.py", *options], cwd=folder, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": url,
                                            "RLWEB_TOKEN": token})


def dead_url() -> str:
    with socket.socket() as unused:  # a port where nothing listens
        unused.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{unused.getsockname()[1]}/"


def assert_every_step_once_from_two_attempts(run: Run) -> None:
    points = list(Event.objects.filter(run=run, kind="train").order_by("seq").values_list("step", "time", "values"))
    assert [step for step, _, _ in points] == list(range(49, 2000, 50))  # each once, in order
    assert all(values["charts/value"] == step for step, _, values in points)
    assert {values["charts/attempt"] for step, _, values in points if step > 1000} == {1000.0}
    times = [time for _, time, _ in points]
    assert times == sorted(times)  # the second attempt's clock goes on from the first's
    assert list(Checkpoint.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [
        500, 1000, 1500, 2000]
    assert run.status == Run.Status.SUCCEEDED and run.attempts == 2
    resumed = Event.objects.get(run=run, kind="resumed")
    assert resumed.step == 1000 and resumed.values["forgot_after"] is True


def test_a_killed_script_started_again_goes_on_from_its_checkpoint_in_the_same_run(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "preemptible job")
    killed = script(tmp_path, live_server.url, token, "--kill-at", "1200")
    assert killed.returncode == -9, killed.stderr
    run = Run.objects.get()
    assert run.status == Run.Status.RUNNING and Event.objects.filter(run=run, step__gt=1000, kind="train").exists()
    assert [path.name for path in (tmp_path / "offline").glob("resume-*.json")], "the run this folder started"

    again = script(tmp_path, live_server.url, token)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert json.loads(again.stdout)["id"] == run.pk
    run.refresh_from_db()
    assert_every_step_once_from_two_attempts(run)
    assert Event.objects.get(run=run, kind="resumed").values["interrupted"] == "running"
    assert not list((tmp_path / "offline").glob("resume-*.json")), "forgotten once the run succeeded"

    (tmp_path / "agent.json").unlink()
    fresh = script(tmp_path, live_server.url, token, "--total-timesteps", "2000")
    assert fresh.returncode == 0 and json.loads(fresh.stdout)["id"] != run.pk  # a succeeded run is not resumed


def test_a_run_resumed_while_the_server_is_out_of_reach_is_synced_into_the_same_run(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "preemptible job")
    assert script(tmp_path, live_server.url, token, "--kill-at", "1200").returncode == -9
    run = Run.objects.get()
    offline = script(tmp_path, dead_url(), token, "--resume", str(run.pk))
    assert offline.returncode == 0 and "python -m rlweb_client sync" in offline.stderr, offline.stderr
    sync = [sys.executable, "-m", "rlweb_client", "sync", "offline", "--url", live_server.url]
    environment = {**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_TOKEN": token}
    synced = subprocess.run(sync, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=environment)
    assert synced.returncode == 0 and f"resumed run {run.pk}" in synced.stdout, synced.stdout + synced.stderr
    run.refresh_from_db()
    assert_every_step_once_from_two_attempts(run)
    events = Event.objects.count()
    again = subprocess.run(sync, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=environment)
    assert again.returncode == 0 and "already synced" in again.stdout
    assert Event.objects.count() == events and Run.objects.count() == 1


def test_resuming_a_run_that_is_not_there_says_so_at_init(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "preemptible job")
    missing = script(tmp_path, live_server.url, token, "--resume", "4242")
    assert missing.returncode == 1
    assert "ValueError: cannot resume run 4242" in missing.stderr and "Not Found" in missing.stderr
    assert not Run.objects.exists()
