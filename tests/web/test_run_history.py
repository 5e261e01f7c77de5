"""The history the run page draws first: every metric downsampled on the server (extremes kept, a bounded
number of points however long the run), the log, checkpoints and videos, and where the stream picks up."""

import random

import pytest
from django.urls import reverse

from rlweb.experiments import history
from rlweb.experiments.models import Event, MetricBucket, Run
from rlweb.experiments.sink import RedisSink


def history_url(run):
    return reverse("run-history", args=[run.pk])


def emit_episodes(sink, returns, first_step=0):
    for offset, episode_return in enumerate(returns):
        step = first_step + 10 * (offset + 1)
        sink.emit({"kind": "episode", "step": step, "time": step / 100,
                   "values": {"rollout/episode_return": episode_return, "rollout/episode_length": offset}})


@pytest.fixture
def few_buckets(monkeypatch):
    monkeypatch.setattr(history, "MAX_BUCKETS", 8)


def test_a_short_run_draws_every_value_with_its_step_and_time(owner_client, trained_run):
    data = owner_client.get(history_url(trained_run)).json()
    episodes = list(Event.objects.filter(run=trained_run, kind="episode"))
    returns = data["metrics"]["rollout/episode_return"]
    assert returns["value"] == [event.values["rollout/episode_return"] for event in episodes]
    assert returns["step"] == [event.step for event in episodes]
    assert returns["time"] == [event.time for event in episodes]
    assert returns["count"] == len(episodes) and "low" not in returns
    assert {"rollout/episode_length", "train/loss", "train/epsilon", "eval/return_mean"} <= set(data["metrics"])
    assert data["last_seq"] == Event.objects.filter(run=trained_run).last().seq
    assert data["run"]["status"] == "succeeded"


def test_a_long_metric_keeps_its_extremes_in_a_bounded_number_of_points(owner_client, queued_run, few_buckets):
    values = [random.Random(seed).uniform(-1, 1) for seed in range(1000)]
    values[137], values[801] = 50.0, -50.0  # a spike and a dip that thinning by stride would drop
    sink = RedisSink(queued_run, batch_size=64)
    emit_episodes(sink, values)
    sink.close()
    returns = owner_client.get(history_url(queued_run)).json()["metrics"]["rollout/episode_return"]
    assert returns["count"] == 1000
    assert len(returns["value"]) <= 2 * 8
    assert 50.0 in returns["value"] and -50.0 in returns["value"]
    assert returns["step"][returns["value"].index(50.0)] == 1380
    assert returns["step"] == sorted(returns["step"])
    assert max(returns["value"]) == max(values) and min(returns["value"]) == min(values)
    assert MetricBucket.objects.filter(run=queued_run, key="rollout/episode_return").count() <= 8


def test_the_summary_stays_right_as_more_events_arrive(owner_client, queued_run, few_buckets):
    sink = RedisSink(queued_run, batch_size=7)
    emit_episodes(sink, [float(i % 13) for i in range(100)])
    sink.flush()
    before = owner_client.get(history_url(queued_run)).json()
    emit_episodes(sink, [float(-i) for i in range(300)] + [99.0], first_step=1000)
    sink.close()
    after = owner_client.get(history_url(queued_run)).json()
    grown = after["metrics"]["rollout/episode_return"]
    assert before["metrics"]["rollout/episode_return"]["count"] == 100 and grown["count"] == 401
    assert grown["through_seq"] == after["last_seq"] == 401
    assert 99.0 in grown["value"] and -299.0 in grown["value"] and 12.0 in grown["value"]
    incremental = history.metric_series(queued_run)
    history.rebuild_summary(queued_run.pk)  # the same events folded in one go
    assert history.metric_series(queued_run) == incremental


def test_an_eval_mean_carries_its_std_band_also_when_downsampled(owner_client, queued_run, few_buckets):
    sink = RedisSink(queued_run, batch_size=50)
    for index in range(40):
        sink.emit({"kind": "eval", "step": 100 * (index + 1), "time": float(index),
                   "values": {"eval/return_mean": float(index), "eval/return_std": 2.0 if index != 9 else 30.0}})
    sink.close()
    metrics = owner_client.get(history_url(queued_run)).json()["metrics"]
    band = metrics["eval/return_mean"]
    assert min(band["low"]) == 9.0 - 30.0 and max(band["high"]) == 39.0 + 2.0
    assert len(band["low"]) == len(band["value"]) <= 16 and 9.0 + 30.0 in band["high"]
    assert metrics["eval/return_std"]["count"] == 40  # also a metric of its own (the CSV has it)


def test_folding_a_batch_at_once_keeps_the_same_buckets_as_one_event_at_a_time(queued_run, make_experiment,
                                                                               few_buckets):
    """The ingest folds a request's points into a bucket at once: the same extremes (the first of equal values),
    bands, counts and merges as folding them one by one."""
    noise = random.Random(7)
    records = [{"seq": seq, "kind": "eval", "step": 10 * seq, "time": seq / 10,
                "values": {"eval/return_mean": float(noise.randint(-3, 3)), "eval/return_std": noise.random(),
                           "train/loss": noise.choice([0.5, 1.5])}} for seq in range(1, 700)]
    one_by_one = Run.objects.create(experiment=make_experiment(name="one by one"), seed=0, total_steps=1)
    for record in records:
        history.summarize(one_by_one.pk, [Event(run=one_by_one, **record)])
    at = 0
    while at < len(records):
        size = noise.choice([1, 2, 3, 50, 130])
        history.summarize(queued_run.pk, records[at:at + size])
        at += size
    fields = ("key", "index", "width", "count", "last_seq", "points", "band")
    assert MetricBucket.objects.filter(run=queued_run).count() > 8  # merged: several widths went by
    assert list(MetricBucket.objects.filter(run=queued_run).order_by("key", "index").values_list(*fields)) == \
        list(MetricBucket.objects.filter(run=one_by_one).order_by("key", "index").values_list(*fields))
    assert history.metric_series(queued_run) == history.metric_series(one_by_one)


def test_a_sink_on_a_run_whose_later_events_were_deleted_summarises_what_is_left(queued_run):
    sink = RedisSink(queued_run, batch_size=10)
    emit_episodes(sink, [1.0] * 20 + [500.0])
    sink.close()
    Event.objects.filter(run=queued_run, seq__gt=20).delete()  # as a resume from a checkpoint does
    sink = RedisSink(queued_run)
    returns = history.metric_series(queued_run)["rollout/episode_return"]
    assert returns["count"] == 20 and 500.0 not in returns["value"] and returns["through_seq"] == 20
    emit_episodes(sink, [7.0], first_step=200)
    sink.close()
    assert history.metric_series(queued_run)["rollout/episode_return"]["value"][-1] == 7.0


def test_the_log_holds_lifecycle_and_eval_events_and_the_lists_come_along(owner_client, trained_run):
    data = owner_client.get(history_url(trained_run)).json()
    kinds = [event["kind"] for event in data["log"]]
    assert kinds[0] == "started" and kinds[-1] == "finished" and "eval" in kinds and "checkpoint" in kinds
    assert "episode" not in kinds and "train" not in kinds
    assert [event["seq"] for event in data["log"]] == sorted(event["seq"] for event in data["log"])
    assert {item["tag"] for item in data["checkpoints"]} == {"best", "final"}
    assert data["videos"] == []


def test_the_log_keeps_the_latest_events_of_its_kinds_in_order(queued_run, monkeypatch):
    monkeypatch.setattr(history, "LOG_LENGTH", 4)
    kinds = ["started", "eval", "train", "checkpoint", "eval", "train", "episode", "checkpoint", "eval", "train"]
    Event.objects.bulk_create(Event(run=queued_run, seq=seq, kind=kind, step=seq, time=seq, values={})
                              for seq, kind in enumerate(kinds, start=1))
    assert [event["seq"] for event in history.log_events(queued_run, 10)] == [4, 5, 8, 9]
    assert [event["seq"] for event in history.log_events(queued_run, 7)] == [1, 2, 4, 5]


def test_a_stranger_gets_a_404(stranger_client, trained_run):
    assert stranger_client.get(history_url(trained_run)).status_code == 404
