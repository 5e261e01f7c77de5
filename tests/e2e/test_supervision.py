"""`make run` supervises (rlweb/devserver.py), with real processes: a worker or a Redis killed with SIGKILL is
started again while the rest of the site keeps answering, and a child that dies at once every time gets a plain
message while Ctrl-C still stops everything."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.stack import running_site, status_of, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUEUE_RUN = """
from django.contrib.auth import get_user_model
from rlweb.experiments.models import Experiment, Run
try:
    from rlweb.experiments.lifecycle import enqueue
except ImportError:
    from rlweb.experiments.tasks import enqueue
owner, _ = get_user_model().objects.get_or_create(username="supervised")
experiment = Experiment.objects.create(
    owner=owner, name="after a kill", algorithm="dqn", env_id="CartPole-v1", total_steps={steps},
    hyperparameters=dict(learning_starts=200, batch_size=32, buffer_size=10_000, train_frequency=4,
                         gradient_steps=1, hidden_layers="32,32"))
run = Run.objects.create(experiment=experiment, total_steps={steps})
enqueue(run)
result = run.pk
"""

RUN_STATE = """
from rlweb.experiments.models import Run
run = Run.objects.get(pk={run_id})
result = dict(status=run.status, steps_done=run.steps_done, error=run.error)
"""

SESSION_COOKIE = """
from django.contrib.auth import get_user_model
from django.test import Client
client = Client()
client.force_login(get_user_model().objects.get(username="supervised"))
result = client.cookies["sessionid"].value
"""

LAST_SEQ = """
from django.db.models import Max
from rlweb.experiments.models import Event
result = Event.objects.filter(run_id={run_id}).aggregate(Max("seq"))["seq__max"] or 0
"""


def signed_in(site):
    """A urllib opener that keeps cookies, signed in as the owner of the runs (a session made for it)."""
    jar = http.cookiejar.CookieJar()
    jar.set_cookie(http.cookiejar.Cookie(
        0, "sessionid", site.orm(SESSION_COOKIE), None, False, "127.0.0.1", False, False, "/", True, False, None,
        True, None, None, {}))
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))


TRAINING_WORKER = ("worker", "--queues cpu,gpu")  # the one that trains; the other serves queue jobs


def pid_of(var: Path, *words: str) -> int:
    """The one process started for `var` whose command line has every word in `words`."""
    found = pids_of(var, *words)
    assert len(found) == 1, (words, found)
    return found[0]


def pids_of(var: Path, *words: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
            environment = (proc / "environ").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        line = b" ".join(command)  # redis-server rewrites its own: "redis-server unixsocket:<var>/redis.sock"
        mine = (f"RLWEB_VAR_DIR={var}\0".encode() in environment or str(var).encode() in command
                or f"{var}/".encode() in line)
        if mine and all(word.encode() in line for word in words) and b"-c" not in command:  # `site.orm` has -c
            found.append(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def trainer_readies(var: Path) -> int:
    """How many times the training worker said it was ready (`rlweb@host ready.`; the jobs worker is `jobs@host`,
    and may say so for the first time at any moment after the site answers)."""
    return len(re.findall(r"rlweb@\S+ ready\.", log_of(var)))


def log_of(var: Path) -> str:
    return (var / "devserver.log").read_text()


def log_end(var: Path):
    """What a failed wait shows (wait_until's `context`): the end of the devserver's log."""
    return lambda: f"the log ends:\n{log_of(var)[-4000:]}"


def supervising(var: Path) -> None:
    """Wait until the devserver has seen the site answer: from then on it restarts what dies."""
    wait_until(lambda: "rlweb is running at" in log_of(var), 60, "the devserver did not say it is running", log_end(var))


def finished(site, run_id: int) -> dict:
    """The run's state once it has ended (within 4 minutes)."""
    def ended():
        state = site.orm(RUN_STATE.format(run_id=run_id))
        return state if state["status"] not in ("queued", "running") else None
    return wait_until(ended, 240, f"run {run_id} did not end", log_end(site.var))


def redis(var: Path, command: bytes) -> bytes | None:
    """One inline command to the site's Redis; None while nothing answers."""
    try:
        with socket.socket(socket.AF_UNIX) as connection:
            connection.settimeout(1)
            connection.connect(str(var / "redis.sock"))
            connection.sendall(command + b"\r\n")
            return connection.recv(64)
    except OSError:
        return None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with running_site(tmp_path_factory.mktemp("sv")) as site:
        supervising(site.var)
        yield site


def test_a_worker_killed_with_sigkill_is_started_again_and_trains_the_next_run_while_the_site_answers(site):
    worker, web, server = pid_of(site.var, *TRAINING_WORKER), pid_of(site.var, "uvicorn"), pid_of(site.var, "redis-server")
    readies = trainer_readies(site.var)
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    while trainer_readies(site.var) == readies:  # a new worker says `rlweb@host ready.`
        assert status_of(site.url + "/login/") == 200  # the site answers all along
        assert time.monotonic() - killed < 120, log_of(site.var)[-4000:]
        time.sleep(0.2)
    print(f"SIGKILL of the worker to the new worker ready: {time.monotonic() - killed:.1f} s")

    log = log_of(site.var)
    assert "the Celery worker was killed by SIGKILL after" in log and "starting the Celery worker again" in log
    assert pid_of(site.var, *TRAINING_WORKER) != worker
    assert (pid_of(site.var, "uvicorn"), pid_of(site.var, "redis-server")) == (web, server)  # the others stayed up
    run_id = site.orm(QUEUE_RUN.format(steps=1_000))
    state = finished(site, run_id)
    assert state["status"] == "succeeded" and state["steps_done"] == 1_000, state


def test_redis_killed_with_sigkill_under_a_training_run_comes_back_with_its_data_and_nothing_else_restarts(site):
    run_id = site.orm(QUEUE_RUN.format(steps=10_000_000))  # trains until it is cancelled below
    wait_until(lambda: (state := site.orm(RUN_STATE.format(run_id=run_id)))["status"] == "running"
               and state["steps_done"] > 0, 180, "the long run did not start training", log_end(site.var))
    worker, web, server = pid_of(site.var, *TRAINING_WORKER), pid_of(site.var, "uvicorn"), pid_of(site.var, "redis-server")
    assert redis(site.var, b"SET written-before-the-kill yes") == b"+OK\r\n"
    # in the append-only file (the write a SIGKILL cannot undo; the disk's fsync every second is for power cuts)
    wait_until(lambda: any(b"written-before-the-kill" in path.read_bytes()
                           for path in (site.var / "redis").rglob("*.aof*") if path.is_file()),
               30, "the key did not reach the append-only file", log_end(site.var))
    killed = time.monotonic()
    os.kill(server, signal.SIGKILL)
    assert status_of(site.url + "/login/") == 200  # a page that does not need Redis answers during the outage
    wait_until(lambda: redis(site.var, b"PING") == b"+PONG\r\n", 60, "Redis did not answer on its socket again",
               log_end(site.var))
    print(f"SIGKILL of Redis to Redis answering again: {time.monotonic() - killed:.1f} s")
    assert "Redis was killed by SIGKILL after" in log_of(site.var)
    assert redis(site.var, b"GET written-before-the-kill") == b"$3\r\nyes\r\n"  # with its data
    # nothing else was restarted: the worker and the web server reconnect by themselves
    assert (pid_of(site.var, *TRAINING_WORKER), pid_of(site.var, "uvicorn")) == (worker, web)

    # the run trains on, and its live stream (the web's Redis client) delivers events made after the restart
    last_before = site.orm(LAST_SEQ.format(run_id=run_id))
    browser = signed_in(site)
    ids = []
    with browser.open(f"{site.url}/runs/{run_id}/stream", timeout=60) as stream:
        assert stream.status == 200
        for line in stream:
            if line.startswith(b"id:"):
                ids.append(int(line.split(b":", 1)[1]))
            if ids and ids[-1] > last_before:
                break
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    assert site.orm(RUN_STATE.format(run_id=run_id))["status"] == "running"

    # Cancel through the site, then the same worker takes the next run: its broker connection came back
    page = browser.open(f"{site.url}/runs/{run_id}/", timeout=60).read().decode()
    token = re.search(r'id="cancel-form".*?name="csrfmiddlewaretoken" value="([^"]+)"', page, re.S).group(1)
    browser.open(f"{site.url}/runs/{run_id}/cancel/", data=f"csrfmiddlewaretoken={token}".encode(), timeout=60)
    wait_until(lambda: site.orm(RUN_STATE.format(run_id=run_id))["status"] == "cancelled", 60,
               "the long run was not cancelled", log_end(site.var))
    next_run = site.orm(QUEUE_RUN.format(steps=1_000))
    state = finished(site, next_run)
    assert state["status"] == "succeeded", state
    assert pid_of(site.var, *TRAINING_WORKER) == worker


def test_a_child_that_keeps_dying_is_reported_plainly_and_ctrl_c_still_stops_everything(tmp_path):
    with running_site(tmp_path) as site:
        supervising(tmp_path)
        supervisor = pid_of(tmp_path, "rlweb.devserver")
        others = [pid_of(tmp_path, *TRAINING_WORKER), pid_of(tmp_path, "worker", "--queues jobs"), pid_of(tmp_path, "beat"),
                  pid_of(tmp_path, "redis-server")]
        web = pid_of(tmp_path, "uvicorn")
        port = int(site.url.rsplit(":", 1)[1])
        os.kill(web, signal.SIGKILL)
        with socket.socket() as squatter:  # another program takes the port: every new web server exits at once
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            deadline = time.monotonic() + 60
            while True:
                try:
                    squatter.bind(("127.0.0.1", port))
                    break
                except OSError:  # the dead one's socket is not closed yet, or a new web server was quicker
                    assert time.monotonic() < deadline
                    for pid in pids_of(tmp_path, "uvicorn"):
                        os.kill(pid, signal.SIGKILL)
                    time.sleep(0.05)
            squatter.listen()
            wait_until(lambda: "the web server keeps dying" in log_of(tmp_path), 240,
                       "no 'keeps dying' message", log_end(tmp_path))
            line = next(line for line in log_of(tmp_path).splitlines() if "the web server keeps dying" in line)
            assert f"read {tmp_path / 'web.log'} for why" in line, line
            assert "rlweb goes on trying, waiting up to 30 s; Ctrl-C stops everything" in line, line
            assert log_of(tmp_path).count("the web server exited with code 3") >= 3  # uvicorn's "startup failed"
            assert "address already in use" in (tmp_path / "web.log").read_text().lower()
            assert all(alive(pid) for pid in others)  # the rest stayed up
            os.kill(supervisor, signal.SIGINT)  # Ctrl-C while the web server waits for its next start
            wait_until(lambda: not alive(supervisor), 60, "Ctrl-C did not stop the devserver", log_end(tmp_path))
    assert not any(alive(pid) for pid in others)
    assert "rlweb: stopping" in log_of(tmp_path)
