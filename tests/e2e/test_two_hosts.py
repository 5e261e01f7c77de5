"""Two hosts, for real: two Celery workers with media and working folders of their own, serving different
queues, share one Redis, one PostgreSQL database and one S3-protocol bucket (moto's standalone server) with a
web server that has a third, empty media folder. Runs launched for each queue train at the same time, each on
the worker of its queue; every checkpoint and video they made downloads from the site (signed in, through the
bucket) and the final checkpoints load with `trainer.load`; no file lands on any host's disk; the workers page
lists both hosts with their queues."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import trainer

from tests.conftest import RedisServer
from tests.e2e.stack import REPO, Site, free_port, status_of, wait_until
from tests.web.s3 import MotoServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USERNAME, PASSWORD = "two-hosts", "a long two-host password 5"
QUEUES = {"cpu": "host-a", "host-b": "host-b"}  # queue -> the worker that serves it
MAKE_RUNS = f"""
from django.contrib.auth import get_user_model
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment
owner = get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r})
result = {{}}
for queue in {list(QUEUES)!r}:
    experiment = Experiment.objects.create(
        owner=owner, name="on " + queue, algorithm="dqn", env_id="CartPole-v1", total_steps=4000, device=queue,
        checkpoint_interval=1000, video_interval=2000, eval_interval=1000, eval_episodes=2,
        hyperparameters=dict(learning_starts=200, batch_size=32, buffer_size=4000, hidden_layers="32,32"))
    result[queue] = [run.pk for run in lifecycle.launch(experiment)][0]
"""
LONG_RUN = f"""
from django.contrib.auth import get_user_model
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment
experiment = Experiment.objects.create(
    owner=get_user_model().objects.get(username={USERNAME!r}), name="host-b dies", algorithm="dqn",
    env_id="CartPole-v1", total_steps=100_000, device="host-b", checkpoint_interval=2000, eval_interval=0,
    hyperparameters=dict(learning_starts=200, batch_size=32, buffer_size=4000, hidden_layers="32,32"))
result = [run.pk for run in lifecycle.launch(experiment)][0]
"""
CANCEL = """
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Run
result = lifecycle.cancel(Run.objects.get(pk={run_id}))
"""
RUN_STATE = """
from rlweb.experiments.models import Run
run = Run.objects.get(pk={run_id})
result = dict(status=run.status, attempts=run.attempts, start_step=run.start_step, steps=run.steps_done,
              checkpoint=max([c.step for c in run.checkpoints.all()], default=0), error=run.error)
"""
RUNS = """
from django.urls import reverse
from rlweb.experiments.models import Run
result = [dict(id=run.pk, queue=run.experiment.device, status=run.status, node=run.worker_node, error=run.error,
               started=run.started_at.timestamp() if run.started_at else None,
               finished=run.finished_at.timestamp() if run.finished_at else None,
               checkpoints=[dict(tag=c.tag, key=c.file.name, url=reverse("checkpoint-download", args=[c.pk]))
                            for c in run.checkpoints.all()],
               videos=[dict(key=v.file.name, url=reverse("video-file", args=[v.pk])) for v in run.videos.all()])
          for run in Run.objects.filter(pk__in={ids}).select_related("experiment").order_by("pk")]
"""


def postgres_database(name: str) -> str:
    """A new, empty PostgreSQL database `name` on the server of DATABASE_URL (or 127.0.0.1:5432), as a URL."""
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not server.startswith("postgres"):
        server = "postgres://postgres@127.0.0.1:5432/postgres"
    admin = server.rsplit("/", 1)[0] + "/postgres"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as error:
        pytest.skip(f"this test shares a PostgreSQL server between the hosts and found none at {admin}: {error}")
    return server.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    import psycopg

    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def files_under(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


class Hosts:
    """The web server and the two workers, each a process with a folder of its own under `root`."""

    def __init__(self, root: Path, shared: dict):
        self.root, self.shared = root, shared
        self.processes: list[subprocess.Popen] = []
        base = {key: value for key, value in os.environ.items()
                if key not in ("REDIS_URL", "DATABASE_URL") and not key.startswith("RLWEB_")}
        self.base = dict(base, PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="rlweb.settings", **shared)

    def env(self, host: str) -> dict:
        folder = self.root / host
        (folder / "tmp").mkdir(parents=True, exist_ok=True)
        return dict(self.base, RLWEB_VAR_DIR=str(folder / "var"), TMPDIR=str(folder / "tmp"))

    def start(self, host: str, *command: str) -> subprocess.Popen:
        log = (self.root / f"{host}.log").open("a")
        process = subprocess.Popen([sys.executable, "-m", *command], cwd=REPO, env=self.env(host), stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def worker(self, host: str, queue: str) -> subprocess.Popen:
        return self.start(host, "celery", "-A", "rlweb", "worker", "--pool", "solo", "-Q", queue, "-n", f"{host}@%h",
                   "--without-gossip", "--without-mingle", "--loglevel", "INFO")

    def wait_until_ready(self, host: str, seconds: float = 120, times: int = 1) -> None:
        deadline = time.monotonic() + seconds
        while (self.root / f"{host}.log").read_text().count(" ready.") < times:
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, 15)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


def signed_in(url: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{url}/login/", timeout=30).raise_for_status()
    answer = session.post(f"{url}/login/", timeout=30, headers={"Referer": f"{url}/login/"},
                          data=dict(username=USERNAME, password=PASSWORD,
                                    csrfmiddlewaretoken=session.cookies["csrftoken"]))
    assert answer.ok and not answer.url.endswith("/login/"), answer.text[-2000:]
    return session


@pytest.mark.timeout(600)
def test_two_workers_with_their_own_disks_share_redis_postgres_and_a_bucket(tmp_path):
    database = postgres_database(f"rlweb_two_hosts_{os.getpid()}")
    redis_server = RedisServer().start()
    s3 = MotoServer().start()
    bucket = s3.bucket("rlweb-two-hosts")
    hosts = Hosts(tmp_path, dict(REDIS_URL=redis_server.url, DATABASE_URL=database, RLWEB_QUEUES="host-b",
                                 RLWEB_SECRET_KEY="the same key on every host of this test",
                                 **s3.environment("rlweb-two-hosts")))
    site = None
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO, env=hosts.env("web"),
                       check=True, capture_output=True, timeout=300)
        port = free_port()
        hosts.start("web", "uvicorn", "rlweb.asgi:application", "--host", "127.0.0.1", "--port", str(port))
        workers = {host: hosts.worker(host, queue) for queue, host in QUEUES.items()}
        for host in QUEUES.values():
            hosts.wait_until_ready(host)
        site = Site(f"http://127.0.0.1:{port}", tmp_path / "web" / "var", hosts.env("web"))
        run_ids = site.orm(MAKE_RUNS)

        deadline = time.monotonic() + 400
        while True:
            runs = site.orm(RUNS.format(ids=list(run_ids.values())))
            if all(run["status"] in ("succeeded", "failed", "cancelled") for run in runs):
                break
            assert time.monotonic() < deadline, (runs, hosts.logs())
            time.sleep(1)
        assert [run["status"] for run in runs] == ["succeeded", "succeeded"], (runs, hosts.logs())

        # each run trained on the worker of its queue, and the two trained at the same time
        for run in runs:
            assert run["node"].startswith(QUEUES[run["queue"]] + "@"), run
        first, second = runs
        assert max(first["started"], second["started"]) < min(first["finished"], second["finished"]), runs

        begin = min(run["started"] for run in runs)
        for run in runs:
            print(f"run {run['id']} (queue {run['queue']}) on {run['node']}: trained from {run['started'] - begin:.1f} s "
                  f"to {run['finished'] - begin:.1f} s, {len(run['checkpoints'])} checkpoints, {len(run['videos'])} videos")

        # every checkpoint and video is in the bucket and downloads from the site, which has no copy on disk
        while status_of(f"{site.url}/login/") != 200:
            time.sleep(0.5)
        session = signed_in(site.url)
        stored = {item.key for item in bucket.objects.all()}
        for run in runs:
            assert {checkpoint["tag"] for checkpoint in run["checkpoints"]} >= {"periodic", "final"}, run
            assert len(run["videos"]) >= 2, run
            for item in run["checkpoints"] + run["videos"]:
                assert item["key"] in stored
                download = session.get(site.url + item["url"], timeout=60)
                assert download.status_code == 200, (item, download.status_code)
                assert download.content == bucket.Object(item["key"]).get()["Body"].read()
            print(f"run {run['id']}: {len(run['checkpoints']) + len(run['videos'])} files downloaded, equal to the bucket's")
            final = next(item for item in run["checkpoints"] if item["tag"] == "final")
            path = tmp_path / f"run{run['id']}-final.zip"
            path.write_bytes(session.get(site.url + final["url"], timeout=60).content)
            agent = trainer.load(path)
            assert agent.env_id == "CartPole-v1" and agent.steps_done == 4000
            assert agent.evaluate(episodes=1)["mean"] > 0
        for host in ("web", *QUEUES.values()):
            assert files_under(tmp_path / host) == [], host  # no media, and the trainers' working folders are clean

        # host-b dies mid-run (SIGKILL) and comes back with empty disks: it resumes the run from the bucket
        run_id = site.orm(LONG_RUN)
        # (long enough to be killed mid-run: a run of 20,000 steps once ended before the kill on a quiet machine)
        state = state_once(site, run_id, lambda state: state["checkpoint"] > 0, hosts)
        assert state["status"] == "running", state
        os.killpg(workers["host-b"].pid, 9)
        workers["host-b"].wait()
        shutil.rmtree(tmp_path / "host-b")
        workers["host-b"] = hosts.worker("host-b", "host-b")  # the same name: it reclaims its run at once
        # once it has saved a checkpoint past the one it resumed from, it is cancelled: its final checkpoint, in the
        # bucket, goes on from there (training the rest of its 100,000 steps cost a minute of CPU and showed no more)
        state = state_once(site, run_id, lambda state: state["attempts"] == 2 and state["status"] != "queued"
                           and state["checkpoint"] > state["start_step"], hosts)
        assert state["status"] == "running", (state, hosts.logs())
        assert 0 < state["start_step"] and state["start_step"] % 2000 == 0, state
        assert site.orm(CANCEL.format(run_id=run_id)) == "stopping"
        state = state_once(site, run_id, lambda state: state["status"] in ("cancelled", "succeeded", "failed"), hosts)
        assert state["status"] == "cancelled" and state["attempts"] == 2, (state, hosts.logs())
        final = site.orm(RUNS.format(ids=[run_id]))[0]["checkpoints"]
        final = next(item for item in final if item["tag"] == "final")
        path = tmp_path / "resumed-final.zip"
        path.write_bytes(session.get(site.url + final["url"], timeout=60).content)
        steps = trainer.load(path).steps_done
        assert state["start_step"] < steps < 100_000, (state, steps)
        print(f"run {run_id}: host-b killed after its checkpoint at step {state['start_step']}, resumed from it on "
              f"empty disks and cancelled at {steps:,}")
        assert files_under(tmp_path / "host-b") == []

        # the workers page names both hosts and what they serve
        page = session.get(f"{site.url}/workers/", timeout=30).text
        for queue, host in QUEUES.items():
            row = re.search(rf'<tr data-node="{host}@.*?</tr>', page, re.DOTALL)
            assert row and f"<code>{queue}</code>" in row.group(0), (host, queue, page[-3000:])
    finally:
        if site is not None:
            site.close()  # its shell's connection, before the database is dropped
        hosts.stop()
        s3.stop()
        redis_server.remove()
        drop_database(database)


def state_once(site: Site, run_id: int, condition, hosts: Hosts, seconds: float = 300) -> dict:
    """The run's state (RUN_STATE) once `condition` holds for it."""
    def reached():
        state = site.orm(RUN_STATE.format(run_id=run_id))
        return state if condition(state) else None
    return wait_until(reached, seconds, f"run {run_id} did not get there", interval=0.5,
                      context=lambda: f"{site.orm(RUN_STATE.format(run_id=run_id))}\n{hosts.logs()}")
