"""The live stream of a run (server-sent events, live.follow: an async generator), served under ASGI and read by
Django's test Client: resuming after Last-Event-ID without losing or doubling an event, heartbeats, the database
fallback for trimmed events, the reset and end messages, and access."""

import json
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import lifecycle, live, redis_keys
from rlweb.experiments.models import Event, Run
from rlweb.experiments.sink import RedisSink
from tests.web.helpers import async_sse_text, events_of, parse_sse, read_sse, read_sse_async, sse_text


def stream_url(run, **query):
    url = reverse("run-stream", args=[run.pk])
    return url + ("?" + "&".join(f"{key}={value}" for key, value in query.items()) if query else "")


def stored_events(run):
    return [event.as_dict() for event in Event.objects.filter(run=run)]


def emit_episodes(sink, count):
    for _ in range(count):
        sink.emit({"kind": "episode", "step": sink.steps_done + 10, "time": 0.1,
                   "values": {"rollout/episode_return": 10.0, "rollout/episode_length": 10}})


async def asgi_stream(user, run, **headers):
    """The ASGI stream of `run` as `user` sees it, past its opening retry hint: its chunks, as an async iterator.
    `await chunks.aclose()` hangs up (the test client's wrapper keeps the test's database connection open)."""
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(stream_url(run), headers=headers)
    chunks = response.streaming_content.__aiter__()
    assert (await chunks.__anext__()).decode().startswith("retry:")
    return chunks


def read_events(user, run, count, **headers):
    """The first `count` events of an unfinished run's stream, then the page hangs up."""
    async def read():
        chunks = await asgi_stream(user, run, **headers)
        messages = []
        while len([message for message in messages if message["event"] == "message" and message["data"]]) < count:
            messages += parse_sse((await chunks.__anext__()).decode())
        await chunks.aclose()
        return events_of(messages)

    return async_to_sync(read)()


@pytest.fixture
def running_run(queued_run):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING, started_at=timezone.now())
    queued_run.refresh_from_db()
    return queued_run


def test_the_stream_sends_every_event_of_a_finished_run_then_ends(owner_client, trained_run):
    response = owner_client.get(stream_url(trained_run))
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    assert response.is_async  # one async generator, which the test Client reads to its end
    assert read_sse(response) == stored_events(trained_run)


@pytest.mark.parametrize("resume", ["header", "query"])
def test_it_resumes_after_the_last_event_id(owner, trained_run, resume):
    everything = stored_events(trained_run)
    cut = len(everything) // 2
    headers = {"Last-Event-ID": str(cut)} if resume == "header" else {}  # the header wins over the query
    url = stream_url(trained_run, last_id=0 if resume == "header" else cut)
    assert async_to_sync(read_sse_async)(owner, url, **headers) == everything[cut:]


def test_a_reconnect_during_a_live_run_neither_loses_nor_doubles_an_event(owner, owner_client, running_run):
    sink = RedisSink(running_run, batch_size=1000, flush_seconds=1000)  # the database lags behind Redis
    sink.emit({"kind": "started", "step": 0, "time": 0.0, "values": {}})
    emit_episodes(sink, 5)
    first = read_events(owner, running_run, 4)  # the page hangs up after 4 events
    emit_episodes(sink, 5)
    sink.emit({"kind": "finished", "step": sink.steps_done, "time": 1.0, "values": {"status": "succeeded"}})
    sink.close()
    second = read_sse(owner_client.get(stream_url(running_run), headers={"Last-Event-ID": str(first[-1]["seq"])}))
    assert [event["seq"] for event in first + second] == list(range(1, 13))
    assert first + second == stored_events(running_run)


def test_history_and_stream_together_give_every_event_once(owner_client, running_run):
    sink = RedisSink(running_run, batch_size=3, flush_seconds=1000)
    sink.emit({"kind": "started", "step": 0, "time": 0.0, "values": {}})
    emit_episodes(sink, 7)  # 3 more reach the database, the last 4 only Redis so far
    history = owner_client.get(reverse("run-history", args=[running_run.pk])).json()
    emit_episodes(sink, 2)
    sink.emit({"kind": "finished", "step": sink.steps_done, "time": 1.0, "values": {"status": "succeeded"}})
    sink.close()
    live_events = read_sse(owner_client.get(stream_url(running_run, last_id=history["last_seq"])))
    returns = history["metrics"]["rollout/episode_return"]
    drawn_steps = returns["step"] + [event["step"] for event in live_events
                                     if event["kind"] == "episode" and event["seq"] > returns["through_seq"]]
    assert drawn_steps == [10 * episode for episode in range(1, 10)]  # as the page draws them
    logged = [event["seq"] for event in history["log"] + live_events if event["kind"] in ("started", "finished")]
    assert logged == [1, 11]


def test_events_trimmed_from_redis_come_from_the_database(owner_client, trained_run, live_redis):
    live_redis.xtrim(redis_keys.stream_key(trained_run.pk), maxlen=3, approximate=False)
    assert read_sse(owner_client.get(stream_url(trained_run))) == stored_events(trained_run)
    live_redis.delete(redis_keys.stream_key(trained_run.pk))  # expired, or Redis restarted empty
    assert read_sse(owner_client.get(stream_url(trained_run))) == stored_events(trained_run)


def test_a_live_stream_stays_bounded_and_a_reconnect_far_behind_gets_every_event_from_the_database(
        owner, running_run, live_redis):
    sink = RedisSink(running_run, batch_size=10, flush_seconds=1000, stream_tail=5)
    sink.emit({"kind": "started", "step": 0, "time": 0.0, "values": {}})
    emit_episodes(sink, 3)
    first = read_events(owner, running_run, 4)
    for _ in range(30):
        emit_episodes(sink, 7)
        assert live_redis.xlen(redis_keys.stream_key(running_run.pk)) <= 5 + 10  # the tail and what is not stored yet
    assert int(live_redis.xrange(redis_keys.stream_key(running_run.pk), count=1)[0][0].split("-")[0]) > 200  # trimmed
    resumed = read_events(owner, running_run, 214 - 4, **{"Last-Event-ID": "4"})
    sink.emit({"kind": "finished", "step": sink.steps_done, "time": 1.0, "values": {"status": "succeeded"}})
    sink.close()
    assert first + resumed == stored_events(running_run)[:214]
    assert async_to_sync(read_sse_async)(owner, stream_url(running_run), **{"Last-Event-ID": "4"}) == stored_events(
        running_run)[4:]


def test_it_sends_heartbeats_while_waiting_and_ends_when_the_run_ends(owner, running_run, settings):
    settings.SSE_HEARTBEAT_SECONDS = 0.1

    async def scenario():
        chunks = await asgi_stream(owner, running_run)
        assert (await chunks.__anext__()).decode() == ": heartbeat\n\n"
        # no final event will ever come
        await sync_to_async(Run.objects.filter(pk=running_run.pk).update)(status=Run.Status.LOST)
        return "".join([chunk.decode() async for chunk in chunks])

    rest = parse_sse(async_to_sync(scenario)())
    assert rest[-1]["event"] == "end" and json.loads(rest[-1]["data"]) == {"status": "lost"}


def test_a_stream_quiet_for_a_whole_heartbeat_gets_the_next_event_at_once(owner, running_run, settings):
    """The blocking read of a quiet stream lasts a heartbeat (5 s): redis-py 8's socket timeout was the same 5 s,
    so that read failed and the stream slept 5 s more, and an event emitted then waited for it."""
    assert settings.SSE_HEARTBEAT_SECONDS == 5  # the real one

    async def scenario():
        chunks = await asgi_stream(owner, running_run)
        started = time.monotonic()
        assert (await chunks.__anext__()).decode() == ": heartbeat\n\n"
        quiet = time.monotonic() - started
        # the database never has it: only Redis
        sink = await sync_to_async(RedisSink)(running_run, batch_size=1000, flush_seconds=1000)
        emitted = time.monotonic()
        await sync_to_async(emit_episodes)(sink, 1)
        message = (await chunks.__anext__()).decode()
        delay = time.monotonic() - emitted
        await chunks.aclose()
        await sync_to_async(sink.close)()
        return quiet, message, delay

    quiet, message, delay = async_to_sync(scenario)()
    assert quiet < 7 and delay < 1  # 10 s before: the timeout, then a 5 s sleep
    assert events_of(parse_sse(message))[0]["seq"] == 1


def test_a_run_cancelled_before_it_started_ends_the_stream_at_once(owner_client, queued_run):
    assert lifecycle.cancel(queued_run) == "cancelled"
    messages = parse_sse(sse_text(owner_client.get(stream_url(queued_run))))
    assert [message["event"] for message in messages] == ["message", "end"]  # retry, then end
    assert json.loads(messages[-1]["data"]) == {"status": "cancelled"}


@pytest.mark.parametrize("query, header", [
    ({"last_id": "abc"}, None), ({"last_id": "-1"}, None), ({"last_id": "1e3"}, None),
    ({}, "not-a-number"), ({"last_id": "9" * 40}, None),
])
def test_a_bad_last_event_id_is_a_400(owner_client, trained_run, query, header):
    headers = {"Last-Event-ID": header} if header else {}
    response = owner_client.get(stream_url(trained_run, **query), headers=headers)
    assert response.status_code == 400 and "last_id" in response.json()["error"]


def test_a_stranger_gets_a_404_and_no_events(stranger, stranger_client, trained_run):
    assert stranger_client.get(stream_url(trained_run)).status_code == 404
    response = async_to_sync(async_404)(stranger, stream_url(trained_run))
    assert response.status_code == 404


async def async_404(user, url):
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(user)
    return await client.get(url)


def test_a_missing_run_is_a_404(owner_client):
    assert owner_client.get("/runs/123456/stream").status_code == 404
    assert owner_client.get("/runs/99999999999999999999999/stream").status_code == 404


def test_the_stream_opens_with_a_retry_hint_and_closes_with_the_final_status(owner, trained_run):
    text = async_to_sync(async_sse_text)(owner, stream_url(trained_run))
    assert text.startswith("retry: 2000\n\n") and text.rstrip().endswith('data: {"status": "succeeded"}')


def test_a_follower_of_an_attempt_that_a_resume_forgot_is_told_to_reload(queued_run, live_redis, settings):
    settings.SSE_HEARTBEAT_SECONDS = 0.2
    run = queued_run
    Run.objects.filter(pk=run.pk).update(status="running", attempts=1)
    sink = RedisSink(run)
    for step in range(1, 6):  # five events; the page drew them all, live
        sink.emit({"kind": "episode", "step": step * 10, "time": float(step),
                   "values": {"rollout/episode_return": 1.0, "rollout/episode_length": 10}})
    sink.flush()

    def resume():
        # the worker died; the run is lost and resumed (with no checkpoint: from scratch), and its next attempt
        # starts streaming before the follower next finds the stream quiet
        run.refresh_from_db()
        lifecycle.forget_dead_attempt(run, None)
        assert run.last_seq == 6 and run.forgotten_seqs == [[0, 6]]
        Run.objects.filter(pk=run.pk).update(attempts=2)
        live_redis.delete(redis_keys.stream_key(run.pk))
        resumed = RedisSink(run)
        resumed.emit({"kind": "started", "step": 20, "time": 2.0, "values": {}})
        assert resumed.seq == 7

    async def scenario():
        follower = live.follow(run.pk, 5)
        assert (await anext(follower)).startswith("retry:") and await anext(follower) == live.HEARTBEAT_MESSAGE
        await sync_to_async(resume)()
        told = await anext(follower)
        await follower.aclose()
        # a page opened after the resume goes on with the new attempt
        rest = live.follow(run.pk, 0)
        opened = [await anext(rest), await anext(rest)]
        await rest.aclose()
        return told, opened

    told, (retry, first) = async_to_sync(scenario)()
    assert told == live.RESET_MESSAGE
    assert retry.startswith("retry:") and json.loads(first.split("data: ")[1])["seq"] == 7


def test_a_live_page_holds_no_database_connection_between_its_reads(transactional_db, queued_run):
    from asgiref.sync import async_to_sync
    from django.db import connection

    assert async_to_sync(live.read_database)(live.run_status, queued_run.pk) == "queued"
    assert connection.connection is None  # closed: a page open for hours does not keep one of the database's
