"""The compare page's push stream (live.watch through compare-stream): one connection for every run the
page shows, saying which of them reported and which ended, so that the page fetches its data again only then;
it ends once no run is left unfinished. Real Redis streams, written by the worker's RedisSink."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments.models import Run
from rlweb.experiments.sink import RedisSink
from tests.web.helpers import async_sse_text, parse_sse, sse_text


def stream_url(*runs) -> str:
    return f"{reverse('compare-stream')}?runs={','.join(str(run.pk) for run in runs)}"


def running(make_experiment, name: str) -> Run:
    experiment = make_experiment(name=name)
    return Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id=name,
                              status=Run.Status.RUNNING, started_at=timezone.now())


def episode(sink: RedisSink) -> None:
    sink.emit({"kind": "episode", "step": sink.steps_done + 10, "time": 0.1,
               "values": {"rollout/episode_return": 10.0, "rollout/episode_length": 10}})


async def next_message(chunks) -> dict:
    """The next message that is not a heartbeat."""
    while True:
        [message] = parse_sse((await chunks.__anext__()).decode())
        if message["comment"] is None:
            return message


def runs_message(message: dict) -> dict:
    assert message["event"] == "runs", message
    return json.loads(message["data"])


def test_one_stream_says_which_runs_reported_and_ended_and_ends_with_the_last(owner, make_experiment, trained_run,
                                                                            settings):
    settings.SSE_HEARTBEAT_SECONDS = 0.2
    first, second = running(make_experiment, "first"), running(make_experiment, "second")
    first_sink, second_sink = RedisSink(first), RedisSink(second)
    episode(first_sink)  # before the page connects: stored, so not news
    first_sink.flush()

    async def scenario():
        client = AsyncClient()
        await client.aforce_login(owner)
        response = await client.get(stream_url(first, second, trained_run))  # the finished one is not followed
        assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
        chunks = response.streaming_content.__aiter__()
        assert (await chunks.__anext__()).decode().startswith("retry:")
        seen = []
        await sync_to_async(episode)(second_sink)
        await sync_to_async(episode)(second_sink)
        seen.append(runs_message(await next_message(chunks)))
        await sync_to_async(episode)(first_sink)
        seen.append(runs_message(await next_message(chunks)))
        await sync_to_async(second_sink.emit)({"kind": "finished", "step": 100, "time": 1.0,
                                               "values": {"status": "succeeded"}})
        seen.append(runs_message(await next_message(chunks)))
        # the first ends without a final event (cancelled while it was quiet): noticed when the streams are quiet
        await sync_to_async(Run.objects.filter(pk=first.pk).update)(status=Run.Status.CANCELLED)
        seen.append(runs_message(await next_message(chunks)))
        seen.append(await next_message(chunks))
        return seen

    two_episodes, one_episode, finished, cancelled, end = async_to_sync(scenario)()
    assert two_episodes == {"changed": {str(second.pk): 2}, "ended": []}
    assert one_episode == {"changed": {str(first.pk): 2}, "ended": []}  # its first event was stored before
    assert finished == {"changed": {str(second.pk): 3}, "ended": [second.pk]}
    assert cancelled == {"changed": {}, "ended": [first.pk]}
    assert end["event"] == "end"


def test_a_stream_of_finished_runs_ends_at_once(owner, owner_client, trained_run):
    messages = parse_sse(async_to_sync(async_sse_text)(owner, stream_url(trained_run)))
    assert [message["event"] for message in messages] == ["message", "end"]  # the retry hint, then the end
    messages = parse_sse(sse_text(owner_client.get(stream_url(trained_run))))  # the test Client reads it whole
    assert [message["event"] for message in messages] == ["message", "end"]


def test_a_stranger_follows_none_of_another_users_runs(stranger, make_experiment):
    run = running(make_experiment, "private")
    RedisSink(run).flush()
    messages = parse_sse(async_to_sync(async_sse_text)(stranger, stream_url(run)))
    assert [message["event"] for message in messages] == ["message", "end"]


@pytest.mark.parametrize("runs", ["abc", "-1", ",".join(str(pk) for pk in range(1, 52))])
def test_bad_run_lists_are_a_400(owner_client, runs):
    response = owner_client.get(f"{reverse('compare-stream')}?runs={runs}")
    assert response.status_code == 400 and response.json()["error"]


def test_the_compare_page_points_its_script_at_the_stream_of_its_runs(owner_client, trained_run):
    page = owner_client.get(f"{reverse('compare')}?runs={trained_run.pk}").content.decode()
    assert f'data-stream-url="{stream_url(trained_run)}"' in page


def test_points_stored_between_the_pages_fetch_and_its_stream_are_announced_at_once(owner, owner_client,
                                                                                     make_experiment, settings):
    settings.SSE_HEARTBEAT_SECONDS = 0.2
    run = running(make_experiment, "quiet after this")
    sink = RedisSink(run)
    episode(sink)
    sink.flush()
    drawn = owner_client.get(reverse("compare-data"), {"runs": str(run.pk)}).json()["runs"][0]["drawn_through"]
    assert drawn == 1
    episode(sink)  # stored after the page fetched its data, before its stream opened; then the run goes quiet
    sink.flush()

    async def first_message(url: str) -> dict:
        client = AsyncClient()
        await client.aforce_login(owner)
        chunks = (await client.get(url)).streaming_content.__aiter__()
        assert (await chunks.__anext__()).decode().startswith("retry:")
        [message] = parse_sse((await chunks.__anext__()).decode())
        return message

    told = async_to_sync(first_message)(f"{stream_url(run)}&after={run.pk}:{drawn}")
    assert runs_message(told) == {"changed": {str(run.pk): 2}, "ended": []}
    not_told = async_to_sync(first_message)(stream_url(run))  # from what the database holds: nothing new yet
    assert not_told["comment"] is not None  # a heartbeat, while the point stored meanwhile is not on the page
    for after in (f"{run.pk}:x", "999999:0", f"{run.pk}:1:2"):  # anything else in it is left out
        assert async_to_sync(first_message)(f"{stream_url(run)}&after={after}")["comment"] is not None
