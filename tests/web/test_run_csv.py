"""The full data of a run as CSV: every stored event, one column per metric key, streamed; owner only."""

import csv
import io

from asgiref.sync import async_to_sync
from django.test import AsyncClient
from django.urls import reverse

from rlweb.experiments.models import Event
from rlweb.experiments.sink import RedisSink


def read_csv(response) -> list[list[str]]:
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response.streaming
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_every_event_is_a_row_with_a_column_per_metric_key(owner_client, trained_run):
    response = owner_client.get(reverse("run-csv", args=[trained_run.pk]))
    assert response["Content-Disposition"] == f'attachment; filename="run{trained_run.pk}-events.csv"'
    header, *rows = read_csv(response)
    events = list(Event.objects.filter(run=trained_run))
    keys = sorted({key for event in events if event.kind in ("episode", "train", "eval", "time")
                   for key in event.values})
    assert header == ["seq", "kind", "step", "time", *keys]
    assert [int(row[0]) for row in rows] == [event.seq for event in events]  # all of them, lifecycle too
    for row, event in zip(rows, events):
        assert row[1] == event.kind and int(row[2]) == event.step and float(row[3]) == event.time
        for key, cell in zip(keys, row[4:]):
            value = event.values.get(key)
            assert cell == ("" if value is None else str(value)), (event.kind, key)


def test_long_runs_are_not_downsampled_in_the_csv(owner_client, queued_run, monkeypatch):
    from rlweb.experiments import history

    monkeypatch.setattr(history, "MAX_BUCKETS", 4)
    sink = RedisSink(queued_run, batch_size=100)
    for index in range(300):
        sink.emit({"kind": "episode", "step": index, "time": index / 10,
                   "values": {"rollout/episode_return": float(index), "rollout/episode_length": 3}})
    sink.close()
    header, *rows = read_csv(owner_client.get(reverse("run-csv", args=[queued_run.pk])))
    assert header == ["seq", "kind", "step", "time", "rollout/episode_length", "rollout/episode_return"]
    assert [float(row[5]) for row in rows] == [float(index) for index in range(300)]


def test_under_asgi_the_csv_is_streamed_by_an_async_iterator(owner, owner_client, trained_run):
    url = reverse("run-csv", args=[trained_run.pk])

    async def fetch() -> str:
        client = AsyncClient()
        await client.aforce_login(owner)
        response = await client.get(url)
        assert response.status_code == 200 and response.is_async
        return "".join([chunk.decode() async for chunk in response.streaming_content])

    assert async_to_sync(fetch)() == b"".join(owner_client.get(url).streaming_content).decode()


def test_a_stranger_gets_a_404(stranger_client, trained_run):
    assert stranger_client.get(reverse("run-csv", args=[trained_run.pk])).status_code == 404
