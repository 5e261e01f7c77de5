"""The live data path under outages: a real redis-server killed and restarted under a running run, the
database locked or gone for a while, with the real task and the real followers."""

import asyncio
import re
import signal
import subprocess
import threading
import time

import pytest
import redis
from django.db import connection
from django.utils import timezone

from rlweb.experiments import checkpoint_jobs, live, redis_keys
from rlweb.experiments.models import Checkpoint, CheckpointJob, Event, Run
from rlweb.experiments.sink import REDIS_TIMEOUT, DatabaseUnavailable, RedisSink
from rlweb.experiments.tasks import train_run
from tests.conftest import redis_server_binary
from tests.web import envs_for_outage_tests
from tests.web.helpers import events_of, parse_sse, read_to_end

Steps = envs_for_outage_tests.Steps


class RedisServer:
    """A redis-server of its own on a unix socket, to stop (SIGKILL) and start again on the same socket."""

    def __init__(self, folder):
        self.folder, self.socket = folder, folder / "redis.sock"
        self.url = f"unix://{self.socket}?db=0"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with redis.Redis.from_url(self.url) as client:
                    client.ping()
                return
            except redis.ConnectionError:
                assert self.process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def own_redis(tmp_path, settings):
    server = RedisServer(tmp_path)
    server.start()
    settings.REDIS_URL = server.url
    yield server
    if server.process.poll() is None:
        server.kill()


class Follower:
    """An open run page's stream, read whenever the test lets it: `read()` takes its messages until it has
    caught up (a heartbeat) or ended. `next_message` gives the generator's next message."""

    def __init__(self, next_message):
        self.next_message, self.text, self.ended = next_message, "", False

    def read(self):
        while not self.ended:
            message = self.next_message()
            if message == live.HEARTBEAT_MESSAGE:
                return
            self.text += message
            self.ended = message.startswith("event: end")

    def events(self):
        return events_of(parse_sse(self.text))


@pytest.mark.slow
def test_a_redis_restart_mid_run_loses_no_event_and_open_pages_continue(
        make_experiment, own_redis, settings, transactional_db):
    settings.SSE_HEARTBEAT_SECONDS = 0.2
    experiment = make_experiment(env_id="rlweb-test/Steps-v0", total_steps=3_000, eval_interval=0, eval_episodes=0,
                                 checkpoint_interval=1_000)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=3_000, task_id="t")
    loop = asyncio.new_event_loop()  # the follower reads the database in asgiref's thread while this one waits
    stream = live.follow(run.pk, 0)
    follower = Follower(lambda: loop.run_until_complete(anext(stream)))
    outage = {}

    def kill_redis():
        follower.read()
        outage["events_before"] = follower.events()[-1]["seq"]
        own_redis.kill()
        outage["start"] = time.monotonic()

    def restart_redis():
        own_redis.start()
        outage["seconds"] = time.monotonic() - outage["start"]

    Steps.hooks = {1_000: kill_redis, 1_500: lambda: time.sleep(2), 2_000: restart_redis}
    assert train_run(run.pk) == "succeeded"
    follower.read()
    loop.run_until_complete(stream.aclose())
    loop.close()

    stored = [event.as_dict() for event in Event.objects.filter(run=run).order_by("seq")]
    assert [event["seq"] for event in stored] == list(range(1, len(stored) + 1))
    assert sum(event["kind"] == "episode" for event in stored) == 300  # every ten-step episode the runner reported
    assert [event["step"] for event in stored if event["kind"] == "checkpoint"] == [1_000, 2_000, 3_000]
    during = [event for event in stored if 1_000 < event["step"] <= 2_000]
    streamed = [int(entry_id.split("-")[0]) for entry_id, _ in
                redis.Redis.from_url(own_redis.url, decode_responses=True).xrange(redis_keys.stream_key(run.pk))]
    assert streamed == list(range(streamed[0], len(stored) + 1))  # the restarted Redis got the buffered events
    assert streamed[0] <= during[0]["seq"]
    assert follower.events() == stored  # no gap, no duplicate
    assert outage["seconds"] > 2 and 0 < outage["events_before"] < during[0]["seq"]
    print(f"Redis down {outage['seconds']:.1f} s; {len(during)} events during it; "
          f"{len(stored)} events produced, {len(stored)} stored, {len(streamed)} in the restarted stream")


class DatabaseOutage:
    """Takes the test database away from this process's connection, for real: on SQLite another connection
    holds it locked (BEGIN EXCLUSIVE, as a backup or a long admin transaction would); on PostgreSQL the
    backend is terminated and new connections are refused (as in a server restart). `end()` gives it back."""

    def __init__(self):
        self.name = connection.settings_dict["NAME"]
        if connection.vendor == "sqlite":
            import sqlite3

            # this process's connection answers "locked" at once, as a refused PostgreSQL connection does,
            # instead of after SQLite's 30 s busy wait (the test database is a file)
            self.timeout = connection.settings_dict["OPTIONS"].get("timeout")
            connection.settings_dict["OPTIONS"]["timeout"] = 0.2
            connection.close()
            self.locker = sqlite3.connect(self.name, uri=True, isolation_level=None, check_same_thread=False)
            self.locker.execute("BEGIN EXCLUSIVE")
            self.locker.execute("UPDATE experiments_run SET steps_done = steps_done")  # a write lock, held
        else:
            import psycopg

            self.locker = psycopg.connect(host=connection.settings_dict["HOST"], port=connection.settings_dict["PORT"],
                                          user=connection.settings_dict["USER"], dbname="postgres", autocommit=True)
            self.locker.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
            self.locker.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                                [self.name])

    def end(self):
        if connection.vendor == "sqlite":
            self.locker.execute("ROLLBACK")
            connection.settings_dict["OPTIONS"]["timeout"] = self.timeout
            connection.close()
        else:
            self.locker.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')
        self.locker.close()


def test_a_short_database_outage_mid_run_loses_no_event(make_experiment, transactional_db, settings):
    settings.HEARTBEAT_TIMEOUT = 600  # the sink waits half of it for the database
    experiment = make_experiment(env_id="rlweb-test/Steps-v0", total_steps=2_000, eval_interval=0, eval_episodes=0,
                                 checkpoint_interval=500)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=2_000, task_id="t")
    outage = {}

    def database_down():
        outage["outage"], outage["start"] = DatabaseOutage(), time.monotonic()

    def database_back():
        time.sleep(max(0.0, 3 - (time.monotonic() - outage["start"])))
        outage["outage"].end()
        outage["seconds"] = time.monotonic() - outage["start"]

    Steps.hooks = {500: database_down, 1_200: database_back}  # a checkpoint (at 1000) during the outage too
    assert train_run(run.pk) == "succeeded"
    stored = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", "kind", "step"))
    assert [seq for seq, _, _ in stored] == list(range(1, len(stored) + 1))
    assert sum(kind == "episode" for _, kind, _ in stored) == 200
    assert [step for _, kind, step in stored if kind == "checkpoint"][-1] == 2_000
    print(f"database down {outage['seconds']:.1f} s ({connection.vendor}); {len(stored)} events, all stored")


def test_a_checkpoint_job_ending_in_a_database_outage_is_recorded_once_the_database_is_back(
        trained_run, transactional_db):
    """Before, the end was logged and lost: the job showed running until fail_stale, an hour on."""
    checkpoint = Checkpoint.objects.get(run=trained_run, tag="final")
    job = CheckpointJob.objects.create(checkpoint=checkpoint, kind="evaluate", episodes=1, status="running",
                                       started_at=timezone.now())
    outage = DatabaseOutage()
    back = threading.Timer(3.0, outage.end)
    started = time.monotonic()
    back.start()
    try:
        status = checkpoint_jobs.finish(job.pk, "succeeded", result={"mean": 1.0, "returns": [1.0]})
        waited = time.monotonic() - started
    finally:
        back.join()
    job.refresh_from_db()
    assert status == "succeeded" and job.status == "succeeded" and job.result["returns"] == [1.0] and job.finished_at
    assert 3.0 <= waited < 3.0 + 8 + 5  # tried again within its longest wait of the database coming back


def test_a_long_database_outage_ends_the_run_with_a_clear_error(queued_run, transactional_db):
    sink = RedisSink(queued_run, flush_seconds=0, database_patience=1.0)
    sink.emit({"kind": "started", "step": 0, "time": 0.0, "values": {}})
    outage = DatabaseOutage()
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match=r"The database did not answer for \d+ s .*events of this run were waiting"):
            for step in range(1, 1_000):
                sink.emit({"kind": "episode", "step": step, "time": step, "values": {"rollout/episode_return": 1.0}})
                time.sleep(0.05)
        assert time.monotonic() - started < 10
    finally:
        outage.end()
    sink.flush()
    assert Event.objects.filter(run=queued_run).count() == sink.seq  # what waited is written once it is back


def test_a_hung_redis_costs_one_timeout_per_back_off_and_followers_read_the_gap_from_the_database(
        queued_run, own_redis, settings):
    """Redis hangs (SIGSTOP: it accepts connections and never answers, as behind a dead link) while 1,000
    events go out; the sink keeps only the newest 100 for the stream. A follower from the start finds the
    stream's gap and reads it from the database."""
    settings.SSE_HEARTBEAT_SECONDS = 0.2
    sink = RedisSink(queued_run, unsent_limit=100)
    emit = lambda kind, step: sink.emit({"kind": kind, "step": step, "time": step, "values": {}})  # noqa: E731
    emit("started", 0)
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        for step in range(1, 1_001):
            emit("episode", step)
        hung_seconds = time.monotonic() - started
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    assert hung_seconds < 3 * REDIS_TIMEOUT + 5  # redis-py's defaults: 11 tries of 5 s for every event
    time.sleep(max(0.0, sink.redis_retry_at - time.monotonic()))
    emit("finished", 1_000)
    sink.close()
    streamed = redis.Redis.from_url(own_redis.url).xrange(redis_keys.stream_key(queued_run.pk))
    streamed = [int(entry_id.split(b"-")[0]) for entry_id, _ in streamed]
    # the newest 100 (events 1 and 2 were stored, then trimmed with the rest of the stream's stored head)
    assert streamed[-100:] == list(range(903, 1_003)) and len(streamed) <= 102
    stored = [event.as_dict() for event in Event.objects.filter(run=queued_run).order_by("seq")]
    assert [event["seq"] for event in stored] == list(range(1, 1_003))
    messages = parse_sse("".join(read_to_end(live.follow(queued_run.pk, 0))))
    assert messages[-1]["event"] == "end" and events_of(messages) == stored
    print(f"1000 events emitted in {hung_seconds:.1f} s while Redis hung")


@pytest.mark.slow
def test_a_run_whose_database_stays_away_too_long_ends_failed_with_a_clear_error(
        make_experiment, settings, transactional_db):
    """The sink gives up 6 to 8 s into the outage (its first failed flush comes up to a second after the
    outage starts, then one a second); the task then waits up to 6 s more to record the failure, and the
    database is back at 10 s."""
    settings.HEARTBEAT_TIMEOUT = 12  # the sink waits half of it for the database
    experiment = make_experiment(env_id="rlweb-test/Steps-v0", total_steps=10**7, eval_interval=0, eval_episodes=0)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=10**7, task_id="t")
    outage = {}

    def database_down():
        outage["outage"], outage["start"] = DatabaseOutage(), time.monotonic()
        threading.Timer(10, outage["outage"].end).start()  # back while the task records the failure

    Steps.hooks = {300: database_down}
    assert train_run(run.pk) == "failed"
    connection.close()  # the outage ended in the timer's thread: this one's connection reopens with the usual wait
    run.refresh_from_db()
    assert re.match(r"DatabaseUnavailable: The database did not answer for [678] s \(", run.error)
    assert 0 < run.steps_done < 10**7
    stored = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", "kind"))
    assert [seq for seq, _ in stored] == list(range(1, len(stored) + 1)) and stored[-1][1] == "failed"
    print(f"gave up on the database; the run failed {time.monotonic() - outage['start']:.1f} s "
          f"into the outage, {len(stored)} events stored")
