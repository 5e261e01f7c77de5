"""The Redis sink a training task reports to (rlweb/experiments/sink.py), on the real Redis and database."""

import json
import math
import time

import numpy as np
import redis
import trainer
from django.core.files.storage import default_storage

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.models import Checkpoint, CheckpointJob, Event, Experiment, Run
from rlweb.experiments.sink import FINISHED_STREAM_SECONDS, RedisSink
from tests.web.helpers import TINY_DQN


def episode(step, episode_return=1.0):
    return {"kind": "episode", "step": step, "time": step / 100,
            "values": {"rollout/episode_return": episode_return, "rollout/episode_length": 10}}


def test_events_are_numbered_and_stream_ids_match_the_database(queued_run, live_redis):
    sink = RedisSink(queued_run)
    for step in (10, 20, 30):
        sink.emit(episode(step))
    sink.close()
    entries = live_redis.xrange(redis_keys.stream_key(queued_run.pk))
    assert [entry_id for entry_id, _ in entries] == ["1-0", "2-0", "3-0"]
    assert [json.loads(fields["event"])["seq"] for _, fields in entries] == [1, 2, 3]
    assert list(Event.objects.filter(run=queued_run).values_list("seq", "step")) == [(1, 10), (2, 20), (3, 30)]


def test_events_reach_the_database_in_batches_and_on_close(queued_run, live_redis):
    sink = RedisSink(queued_run, batch_size=3, flush_seconds=1000)
    sink.emit(episode(10))
    sink.emit(episode(20))
    assert Event.objects.filter(run=queued_run).count() == 0
    assert live_redis.xlen(redis_keys.stream_key(queued_run.pk)) == 2  # live at once, persisted later
    sink.emit(episode(30))
    assert Event.objects.filter(run=queued_run).count() == 3
    sink.emit(episode(40))
    sink.close()
    assert Event.objects.filter(run=queued_run).count() == 4


def test_lifecycle_events_are_written_at_once(queued_run):
    sink = RedisSink(queued_run, batch_size=1000, flush_seconds=1000)
    sink.emit({"kind": "started", "step": 0, "time": 0.0, "values": {"device": "cpu"}})
    assert Event.objects.filter(run=queued_run, kind="started").exists()


def test_polling_for_stop_updates_steps_and_the_heartbeat(queued_run):
    sink = RedisSink(queued_run, batch_size=1000, flush_seconds=0)
    sink.emit(episode(120))
    assert sink.should_stop() is False
    queued_run.refresh_from_db()
    assert queued_run.steps_done == 120 and queued_run.heartbeat_at is not None


def test_the_stop_flag_stops_the_run(queued_run):
    sink = RedisSink(queued_run)
    assert not sink.should_stop()
    redis_keys.request_stop(queued_run.pk)
    assert sink.should_stop()


def test_checkpoints_are_copied_into_storage_with_one_best_and_one_final(queued_run, tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", device="cpu", **TINY_DQN)
    sink = RedisSink(queued_run)
    for step, tag in [(100, "periodic"), (100, "best"), (200, "periodic"), (200, "best"), (300, "final")]:
        path = agent.save(tmp_path / f"{tag}.zip")
        sink.emit({"kind": "checkpoint", "step": step, "time": 1.0, "values": {"path": str(path), "tag": tag,
                                                                               "step": step}})
    sink.close()
    checkpoints = Checkpoint.objects.filter(run=queued_run)
    assert sorted((checkpoint.tag, checkpoint.step) for checkpoint in checkpoints) == [
        ("best", 200), ("final", 300), ("periodic", 100), ("periodic", 200)]
    assert all(default_storage.exists(checkpoint.file.name) for checkpoint in checkpoints)
    assert len(default_storage.listdir(f"checkpoints/run_{queued_run.pk}")[1]) == 4  # the old best is gone
    events = Event.objects.filter(run=queued_run, kind="checkpoint")
    assert {event.values["checkpoint_id"] for event in events} >= {checkpoint.pk for checkpoint in checkpoints}


def checkpoint_event(tmp_path, step: int, tag: str = "periodic") -> dict:
    path = tmp_path / f"{tag}_{step}.zip"
    path.write_bytes(b"weights" * step)
    return {"kind": "checkpoint", "step": step, "time": 1.0, "values": {"path": str(path), "tag": tag, "step": step}}


def test_a_run_keeps_its_latest_periodic_checkpoints_and_its_best_and_final_and_deletes_the_files_of_older_ones(
        make_experiment, tmp_path):
    run = Run.objects.create(experiment=make_experiment(keep_checkpoints=2), seed=0, total_steps=1_000)
    sink = RedisSink(run)
    sink.emit(checkpoint_event(tmp_path, 50, "best"))
    for step in (100, 200, 300, 400):
        sink.emit(checkpoint_event(tmp_path, step))
    sink.emit(checkpoint_event(tmp_path, 500, "final"))
    sink.close()
    assert sorted((checkpoint.tag, checkpoint.step) for checkpoint in Checkpoint.objects.filter(run=run)) == [
        ("best", 50), ("final", 500), ("periodic", 300), ("periodic", 400)]
    assert sorted(default_storage.listdir(f"checkpoints/run_{run.pk}")[1]) == [
        "best.zip", "final.zip", "step_300.zip", "step_400.zip"]
    # the worker's own copies of the periodic ones went once stored: its scratch folder does not fill either
    assert sorted(path.name for path in tmp_path.glob("*.zip")) == ["best_50.zip", "final_500.zip"]


def test_a_periodic_checkpoint_past_the_kept_ones_stays_for_the_jobs_asked_on_it(make_experiment, tmp_path):
    run = Run.objects.create(experiment=make_experiment(keep_checkpoints=1), seed=0, total_steps=1_000)
    sink = RedisSink(run)
    sink.emit(checkpoint_event(tmp_path, 100))
    asked_on = Checkpoint.objects.get(run=run)
    CheckpointJob.objects.create(checkpoint=asked_on, kind=CheckpointJob.Kind.EVALUATE)
    sink.emit(checkpoint_event(tmp_path, 200))
    sink.emit(checkpoint_event(tmp_path, 300))
    sink.close()
    asked_on.refresh_from_db()
    assert asked_on.replaced and default_storage.exists(asked_on.file.name)
    assert [checkpoint.step for checkpoint in run.current_checkpoints()] == [300]
    assert sorted(checkpoint.step for checkpoint in Checkpoint.objects.filter(run=run)) == [100, 300]


def test_an_experiment_that_keeps_every_checkpoint_deletes_none(make_experiment, tmp_path):
    run = Run.objects.create(experiment=make_experiment(keep_checkpoints=0), seed=0, total_steps=1_000)
    sink = RedisSink(run)
    for step in range(100, 2_600, 100):
        sink.emit(checkpoint_event(tmp_path, step))
    sink.close()
    assert Checkpoint.objects.filter(run=run).count() == 25


def test_a_checkpoint_file_that_vanished_is_skipped(queued_run, tmp_path):
    sink = RedisSink(queued_run)
    sink.emit({"kind": "checkpoint", "step": 5, "time": 1.0, "values": {"path": str(tmp_path / "gone.zip"),
                                                                        "tag": "final", "step": 5}})
    sink.close()
    assert not Checkpoint.objects.filter(run=queued_run).exists()
    assert Event.objects.get(run=queued_run).values["checkpoint_id"] is None


def test_values_become_plain_json_without_nan(queued_run, live_redis):
    sink = RedisSink(queued_run)
    sink.emit({"kind": "train", "step": 1, "time": np.float32(0.5),
               "values": {"train/loss": float("nan"), "train/q_mean": np.float64(2.5), "train/inf": math.inf,
                          "nested": {"counts": np.array([1, 2])[0:1].tolist()}}})
    sink.close()
    stored = Event.objects.get(run=queued_run).values
    assert stored == {"train/loss": None, "train/q_mean": 2.5, "train/inf": None, "nested": {"counts": [1]}}
    streamed = json.loads(live_redis.xrange(redis_keys.stream_key(queued_run.pk))[0][1]["event"])
    assert streamed["values"] == stored


def test_training_goes_on_when_redis_is_unreachable(queued_run, tmp_path):
    unreachable = redis.Redis(unix_socket_path=str(tmp_path / "no-redis.sock"), socket_connect_timeout=0.2,
                              retry=None)
    sink = RedisSink(queued_run, client=unreachable)
    sink.emit(episode(10))
    assert sink.should_stop() is False
    sink.close()
    assert Event.objects.filter(run=queued_run).count() == 1


def test_a_run_marked_lost_after_its_heartbeat_stops(queued_run, settings):
    from datetime import timedelta

    from django.utils import timezone

    Experiment.objects.filter(pk=queued_run.experiment_id).update(auto_resume=False)
    Run.objects.filter(pk=queued_run.pk).update(status="running", heartbeat_at=timezone.now())
    assert lifecycle.mark_lost_runs() == 0
    stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 1)
    Run.objects.filter(pk=queued_run.pk).update(heartbeat_at=stale)
    assert lifecycle.mark_lost_runs() == 1
    queued_run.refresh_from_db()
    assert queued_run.status == "lost"


def test_a_finished_runs_stream_keeps_a_short_tail_and_expires_while_the_database_keeps_everything(
        queued_run, live_redis):
    sink = RedisSink(queued_run, batch_size=10, stream_tail=5)
    for step in range(1, 41):
        sink.emit(episode(step))
    sink.emit({"kind": "finished", "step": 40, "time": 1.0, "values": {"status": "succeeded"}})
    sink.close()
    key = redis_keys.stream_key(queued_run.pk)
    assert [entry_id for entry_id, _ in live_redis.xrange(key)] == ["37-0", "38-0", "39-0", "40-0", "41-0"]
    assert 0 < live_redis.ttl(key) <= FINISHED_STREAM_SECONDS
    assert list(Event.objects.filter(run=queued_run).values_list("seq", flat=True)) == list(range(1, 42))


def test_redis_memory_does_not_grow_with_the_number_of_finished_runs(make_experiment, live_redis, monkeypatch):
    monkeypatch.setattr("rlweb.experiments.sink.FINISHED_STREAM_SECONDS", 1)
    experiment = make_experiment()
    before = live_redis.info("memory")["used_memory"]
    runs = []
    for seed in range(50):
        run = Run.objects.create(experiment=experiment, seed=seed, total_steps=100, task_id=f"task-{seed}")
        sink = RedisSink(run, batch_size=20, stream_tail=10)
        for step in range(1, 101):
            sink.emit(episode(step))
            assert live_redis.xlen(redis_keys.stream_key(run.pk)) <= 10 + 20
        sink.close()
        runs.append(run)
    # only tails, until they expire
    assert sum(live_redis.xlen(redis_keys.stream_key(run.pk)) for run in runs) <= 50 * 10
    time.sleep(1.5)
    assert not any(live_redis.exists(redis_keys.stream_key(run.pk)) for run in runs)
    assert live_redis.info("memory")["used_memory"] - before < 100_000  # 5,000 events of about 150 bytes came by
    assert Event.objects.filter(run__in=runs).count() == 50 * 100
