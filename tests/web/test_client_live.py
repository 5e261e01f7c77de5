"""rlweb_client against the real server: a small CleanRL-style script (random actions on CartPole, a linear value
function learnt by TD(0)) logs `charts/...` and `losses/...` points, a video and a checkpoint through the client in
a subprocess, to pytest-django's live server with a real API token; the points stored are the points it logged.
Then the same script with the server out of reach: its offline file, uploaded by `python -m rlweb_client sync`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import reverse

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Checkpoint, Event, Run, Video
from rlweb.logged.models import LoggedRun

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread reads what the test wrote

CLIENT = Path(__file__).resolve().parents[2] / "client"
SCRIPT = '''
import argparse, json, time
import gymnasium as gym
import numpy as np
import rlweb_client

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="CartPole-v1")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--total-timesteps", type=int, default=3000)
parser.add_argument("--learning-rate", type=float, default=0.01)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--step-seconds", type=float, default=0.0, help="a pause each step, as training takes")
parser.add_argument("--out")
args = parser.parse_args()

run = rlweb_client.init(experiment="cleanrl-cartpole", config=vars(args), name=f"seed {args.seed}",
                        offline_dir="offline")
env = gym.wrappers.RecordEpisodeStatistics(gym.make(args.env_id))
rng = np.random.default_rng(args.seed)
weights = np.zeros(4)
logged, td_errors = [], []
obs, _ = env.reset(seed=args.seed)
for global_step in range(args.total_timesteps):
    next_obs, reward, terminated, truncated, info = env.step(int(rng.integers(2)))
    target = reward + (0.0 if terminated else args.gamma * next_obs @ weights)
    td_error = target - obs @ weights
    weights += args.learning_rate * td_error * obs
    td_errors.append(td_error ** 2)
    obs = next_obs
    time.sleep(args.step_seconds)
    if "episode" in info:
        values = {"charts/episodic_return": info["episode"]["r"], "charts/episodic_length": info["episode"]["l"]}
        run.log(values, step=global_step)
        logged.append([global_step, {name: float(value) for name, value in values.items()}])
    if terminated or truncated:
        obs, _ = env.reset()
    if global_step % 100 == 99:
        values = {"losses/value_loss": float(np.mean(td_errors)), "charts/SPS": 1000}
        run.log(values, step=global_step)
        logged.append([global_step, values])
        td_errors = []
with open("episode.mp4", "wb") as video, open("agent.cleanrl_model", "wb") as model:
    video.write(b"a video"), model.write(weights.tobytes())
run.log_video("episode.mp4", step=args.total_timesteps)
run.log_checkpoint("agent.cleanrl_model", step=args.total_timesteps)
run.finish()
with open(args.out, "w") as out:
    json.dump({"id": run.id, "url": run.url, "logged": logged}, out)
'''


def start_script(folder: Path, url: str, token: str, *options: str) -> subprocess.Popen:
    (folder / "train.py").write_text(SCRIPT)
    return subprocess.Popen([sys.executable, "train.py", "--seed", "3", "--out", "out.json", *options], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": url, "RLWEB_TOKEN": token,
                                 "RLWEB_SYSTEM_METRICS_SECONDS": "0.2"})


def result_of(script: subprocess.Popen, folder: Path) -> dict:
    _, errors = script.communicate(timeout=300)
    assert script.returncode == 0, errors
    return {**json.loads((folder / "out.json").read_text()), "stderr": errors}


def run_script(folder: Path, url: str, token: str) -> dict:
    return result_of(start_script(folder, url, token), folder)


class Relay:
    """A TCP relay in front of the live server that the test takes down (connections refused, open ones cut) and
    brings back on the same port: the server out of the script's reach, as when it stops or the network fails."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.target = (parts.hostname, parts.port)
        self.port = 0
        self.listener = None
        self.connections: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://{self.target[0]}:{self.port}/"

    def start(self) -> "Relay":
        self.listener = socket.create_server((self.target[0], self.port), reuse_port=False)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, args=(self.listener,), daemon=True).start()
        return self

    def accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            self.connections += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(source, target), daemon=True).start()

    def stop(self) -> None:
        for connection in [self.listener, *self.connections]:
            try:
                connection.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the relay's thread
            except OSError:
                pass
            connection.close()
        self.connections = []


def pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def stored_points(run: Run) -> list:
    return [[event.step, event.values] for event in Event.objects.filter(run=run, kind__in=["train", "episode"])]


def assert_stored_as_logged(run: Run, logged: list, folder: Path) -> None:
    assert len(logged) > 40
    assert stored_points(run) == logged
    assert run.status == Run.Status.SUCCEEDED
    assert run.experiment.name == "cleanrl-cartpole"
    assert LoggedRun.objects.get(pk=run.pk).config["learning_rate"] == 0.01
    assert "train.py --seed 3 --out out.json" in LoggedRun.objects.get(pk=run.pk).command
    assert [video.step for video in Video.objects.filter(run=run)] == [3000]
    checkpoint = Checkpoint.objects.get(run=run)
    assert checkpoint.step == 3000 and checkpoint.file.read() == (folder / "agent.cleanrl_model").read_bytes()


def test_a_cleanrl_style_script_logs_through_the_client_and_the_server_stores_what_it_logged(
        live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "cartpole script")
    result = run_script(tmp_path, live_server.url, token)
    run = Run.objects.select_related("experiment").get(pk=result["id"])
    assert_stored_as_logged(run, result["logged"], tmp_path)
    assert result["url"] == live_server.url + run.get_absolute_url()
    assert result["stderr"] == "" and not (tmp_path / "offline").exists()
    samples = [event.values for event in Event.objects.filter(run=run, kind="time")]  # the client's, every 0.2 s
    assert samples and all(sample["system/rss_mb"] > 10 and sample["system/cpu_percent"] >= 0 for sample in samples)
    drawn = Client()
    drawn.force_login(owner)
    assert "system/cpu_percent" in drawn.get(reverse("run-history", args=[run.pk])).json()["metrics"]


def test_a_script_that_cannot_reach_the_server_is_uploaded_later_by_sync(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "cartpole script")
    with socket.socket() as unused:  # a port where nothing listens
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}/"
    result = run_script(tmp_path, dead, token)
    assert result["id"] is None and "python -m rlweb_client sync" in result["stderr"]
    sync = [sys.executable, "-m", "rlweb_client", "sync", "offline", "--url", live_server.url]
    environment = {**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_TOKEN": token}
    first = subprocess.run(sync, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=environment)
    assert first.returncode == 0, first.stdout + first.stderr
    run = Run.objects.select_related("experiment").get()
    assert_stored_as_logged(run, result["logged"], tmp_path)
    events = Event.objects.count()
    second = subprocess.run(sync, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=environment)
    assert second.returncode == 0 and "already synced" in second.stdout
    assert Event.objects.count() == events and Run.objects.count() == 1


def test_no_point_is_lost_or_doubled_while_the_server_is_out_of_reach_for_ten_seconds(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "cartpole script")
    relay = Relay(live_server.url).start()
    script = start_script(tmp_path, relay.url, token, "--step-seconds", "0.005")  # 3000 steps: 15 s or more
    deadline = time.monotonic() + 60
    while not LoggedRun.objects.filter(stored_through__gt=0).exists():
        assert time.monotonic() < deadline and script.poll() is None, "the script stored nothing"
        time.sleep(0.1)
    relay.stop()
    time.sleep(10)
    assert script.poll() is None, "the script ran through the outage"
    relay.start()
    result = result_of(script, tmp_path)
    run = Run.objects.select_related("experiment").get(pk=result["id"])
    assert_stored_as_logged(run, result["logged"], tmp_path)
    assert "retrying" in result["stderr"] and not (tmp_path / "offline").exists()


def test_the_readmes_example_script_runs_as_written(live_server, owner, tmp_path):
    section = (CLIENT.parent / "README.md").read_text().split("## From your own script\n", 1)[1]
    (tmp_path / "train.py").write_text(section.split("```python\n", 1)[1].split("```", 1)[0])
    _, token = ApiToken.issue(owner, "my-script")
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": live_server.url,
                               "RLWEB_TOKEN": token})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    run = Run.objects.select_related("experiment").get()
    assert done.stdout == f"live at {live_server.url}{run.get_absolute_url()}\n"
    assert run.experiment.name == "cartpole-random" and run.status == Run.Status.SUCCEEDED
    returns = [event.values["charts/episodic_return"] for event in Event.objects.filter(run=run, kind="train")]
    assert len(returns) > 50 and all(return_ >= 1 for return_ in returns)
