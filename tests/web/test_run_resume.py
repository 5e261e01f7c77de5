"""Resuming a cancelled or lost run: it is queued again, the task loads its latest checkpoint and trains on to
`total_steps`. What the interrupted attempt reported after that checkpoint is forgotten, so the stored history
(and the live stream) goes on with no step reported twice and none left out."""

import json
import re
import threading
import time
import zipfile
from datetime import timedelta

import pytest
import redis
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run
from rlweb.experiments.tasks import train_run
from tests.web.helpers import events_of, parse_sse, read_sse, register_idle_workers, sse_text

TOTAL = 6_000
EVAL_INTERVAL = 500


def resume(client, run):
    return client.post(reverse("run-resume", args=[run.pk]))


def stop_once_past(redis_url: str, run_id: int, step: int, pressed: dict) -> threading.Thread:
    """Press cancel (the stop flag) as soon as the run's live stream reports an event past `step`; the time
    it was pressed goes into `pressed["at"]`."""
    def watch():
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        last_id, deadline = "0-0", time.monotonic() + 120
        while time.monotonic() < deadline:
            for _, entries in client.xread({redis_keys.stream_key(run_id): last_id}, block=100, count=500) or []:
                for last_id, fields in entries:
                    if json.loads(fields["event"])["step"] > step:
                        client.set(redis_keys.stop_key(run_id), "1")
                        pressed["at"] = time.monotonic()
                        return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def cancelled_midway(make_experiment, redis_url, **fields) -> Run:
    """A run trained by the real task and cancelled through its stop flag somewhere after step 600."""
    experiment = make_experiment(total_steps=TOTAL, eval_interval=EVAL_INTERVAL, **fields)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=TOTAL, task_id="first")
    pressed = {}
    watcher = stop_once_past(redis_url, run.pk, 600, pressed)
    assert train_run(run.pk) == "cancelled"
    ended = time.monotonic()
    watcher.join(timeout=5)
    assert ended - pressed["at"] < 5  # stopped at its next check (every 0.5 s), final checkpoint saved, ended
    run.refresh_from_db()
    assert 600 < run.steps_done < TOTAL and run.finished_at
    return run


def steps(run, kind: str) -> list[int]:
    return list(Event.objects.filter(run=run, kind=kind).order_by("seq").values_list("step", flat=True))


def assert_contiguous(run, resumed_at: int) -> None:
    """The stored history of a run resumed at `resumed_at` reads as one run from 0 to total_steps."""
    events = list(Event.objects.filter(run=run).order_by("seq"))
    run.refresh_from_db()
    # each attempt numbers on from 1, the resumed one after every seq the interrupted one sent (forgotten)
    (kept, through), = run.forgotten_seqs
    first = [event for event in events if event.seq <= kept]
    assert [event.seq for event in first] == list(range(1, kept + 1))
    assert [event.seq for event in events[kept:]] == list(range(through + 1, through + 1 + len(events) - kept))
    assert [event.step for event in events] == sorted(event.step for event in events)  # never back in time
    # one evaluation every EVAL_INTERVAL steps and a final one, none twice, none missing
    assert steps(run, "eval") == list(range(EVAL_INTERVAL, TOTAL, EVAL_INTERVAL)) + [TOTAL]
    # episodes are reported at their last step, before it is counted: episode k covers the steps
    # [step - length + 1, step + 1). With a single env each one starts where the one before it ended, the
    # first of each attempt at that attempt's start step: no step counted twice or lost at the resume
    spans = [(event.step - event.values["rollout/episode_length"] + 1, event.step + 1)
             for event in events if event.kind == "episode"]
    before = [span for span in spans if span[1] <= resumed_at + 1]
    after = [span for span in spans if span[1] > resumed_at + 1]
    assert before and after
    assert before[0][0] == 0 and after[0][0] == resumed_at
    for attempt in (before, after):
        assert all(start == previous_end for (_, previous_end), (start, _) in zip(attempt, attempt[1:]))
    started = [event for event in events if event.kind == "started"]
    assert [event.values["start_step"] for event in started] == [0, resumed_at]
    assert [event.kind for event in events].count("finished") == 1 and events[-1].kind == "finished"
    assert events[-1].step == TOTAL and events[-1].values["status"] == "succeeded"
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.steps_done == TOTAL


def test_a_cancelled_run_resumes_from_its_final_checkpoint_and_its_history_stays_contiguous(
        owner_client, make_experiment, redis_url, live_redis, django_capture_on_commit_callbacks):
    run = cancelled_midway(make_experiment, redis_url)
    stopped_at = run.steps_done
    first_start, first_attempt = run.first_started_at, (run.finished_at - run.started_at).total_seconds()
    assert first_start == run.started_at and run.attempts == 1 and run.earlier_attempts_seconds == 0
    final = Checkpoint.objects.get(run=run, tag="final")
    assert final.step == stopped_at
    assert live_redis.exists(redis_keys.stop_key(run.pk))  # the cancel's flag is still there

    register_idle_workers("cpu")
    with django_capture_on_commit_callbacks(execute=True):
        response = resume(owner_client, run)
    assert response.status_code == 302 and response["Location"] == run.get_absolute_url()
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.resume_requested and run.task_id not in ("", "first")
    assert run.earlier_attempts_seconds == first_attempt and run.started_at is None and run.attempts == 1
    assert json.loads(live_redis.lindex("cpu", 0))["headers"]["id"] == run.task_id
    assert not live_redis.exists(redis_keys.stop_key(run.pk))  # else it would stop again at once
    # a page opened before a worker claims it: the history ends at the checkpoint, with no "finished:
    # cancelled" in the log, and the stream it follows from there will carry the resumed attempt whole
    waiting = owner_client.get(reverse("run-history", args=[run.pk])).json()
    marker = Event.objects.get(run=run, kind="checkpoint", values__checkpoint_id=final.pk)
    assert waiting["last_seq"] == marker.seq and Event.objects.filter(run=run).count() == marker.seq
    assert waiting["run"]["status"] == "queued" and waiting["run"]["steps_done"] == stopped_at
    assert "finished" not in [event["kind"] for event in waiting["log"]]

    assert train_run(run.pk) == "succeeded"  # what the worker does with the message
    resumed = read_sse(owner_client.get(reverse("run-stream", args=[run.pk]), HTTP_LAST_EVENT_ID=str(marker.seq)))
    run.refresh_from_db()
    assert run.forgotten_seqs == [[marker.seq, run.last_seq]] and run.last_seq > marker.seq  # "finished", ...
    assert resumed[0]["seq"] == run.last_seq + 1 and resumed[0]["kind"] == "started"
    assert resumed[-1]["kind"] == "finished" and resumed[-1]["values"]["status"] == "succeeded"
    assert_contiguous(run, resumed_at=stopped_at)
    assert Checkpoint.objects.get(run=run, tag="final").step == TOTAL
    run.refresh_from_db()
    assert run.start_step == stopped_at and not run.resume_requested and run.finished_at
    assert run.first_started_at == first_start and run.attempts == 2 and run.earlier_attempts_seconds == first_attempt
    assert run.training_seconds == first_attempt + (run.finished_at - run.started_at).total_seconds()
    assert " over 2 attempts</dd>" in owner_client.get(run.get_absolute_url()).content.decode()
    # the live stream holds the resumed attempt's events under the same numbers as the database
    streamed = [json.loads(fields["event"]) for _, fields in live_redis.xrange(redis_keys.stream_key(run.pk))]
    stored = [event.as_dict() for event in Event.objects.filter(run=run, seq__gte=streamed[0]["seq"])]
    assert streamed == stored and streamed[0]["kind"] == "started" and streamed[0]["step"] == stopped_at
    # a page that follows the stream from the start gets the whole history once, in order
    followed = read_sse(owner_client.get(reverse("run-stream", args=[run.pk])))
    assert [event["seq"] for event in followed] == list(Event.objects.filter(run=run).values_list("seq", flat=True))
    # on the run's clock, which the resumed attempt carries on from its checkpoint: a wall-time axis goes on
    times = [event["time"] for event in followed]
    assert times == sorted(times)
    # and the charts' (downsampled) history has each evaluation once and episodes in step order
    metrics = owner_client.get(reverse("run-history", args=[run.pk])).json()["metrics"]
    assert metrics["eval/return_mean"]["step"] == steps(run, "eval")
    episode_steps = metrics["rollout/episode_return"]["step"]
    assert episode_steps == sorted(set(episode_steps))
    assert metrics["rollout/episode_return"]["time"] == sorted(metrics["rollout/episode_return"]["time"])
    assert metrics["rollout/episode_return"]["count"] == len(steps(run, "episode"))



def test_a_run_resumed_from_a_checkpoint_saved_without_the_clock_goes_on_from_its_events_time(
        owner_client, make_experiment, redis_url, django_capture_on_commit_callbacks):
    run = cancelled_midway(make_experiment, redis_url)
    final = Checkpoint.objects.get(run=run, tag="final")
    with zipfile.ZipFile(final.file.path) as archive:
        config, model = json.loads(archive.read("config.json")), archive.read("model.safetensors")
    del config["seconds_trained"]  # as checkpoints were written before they held the run's clock
    with zipfile.ZipFile(final.file.path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.safetensors", model)
    saved_at = final.reported_event().time
    assert saved_at > 0

    with django_capture_on_commit_callbacks(execute=True):
        assert resume(owner_client, run).status_code == 302
    assert train_run(run.pk) == "succeeded"
    times = list(Event.objects.filter(run=run).order_by("seq").values_list("time", flat=True))
    assert times == sorted(times)
    assert Event.objects.filter(run=run, kind="started").order_by("seq").last().time >= saved_at

def test_a_lost_run_resumes_from_its_last_periodic_checkpoint_and_forgets_what_came_after(
        owner_client, make_experiment, redis_url, django_capture_on_commit_callbacks):
    run = cancelled_midway(make_experiment, redis_url, checkpoint_interval=300)
    # as if the worker had died instead, just before its last step: no checkpoint from that step, no end
    Checkpoint.objects.filter(run=run, step__gte=run.steps_done).delete()
    last_finished = Event.objects.filter(run=run, kind="finished").get()
    last_finished.delete()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.LOST)
    periodic = Checkpoint.objects.filter(run=run, tag="periodic").order_by("-step").first()
    assert periodic.step % 300 == 0 and periodic.step < run.steps_done
    reported_after = Event.objects.filter(run=run, step__gt=periodic.step).count()
    assert reported_after > 0

    with django_capture_on_commit_callbacks(execute=True):
        resume(owner_client, run)
    # a page opened before a worker claims it draws nothing past the checkpoint
    metrics = owner_client.get(reverse("run-history", args=[run.pk])).json()["metrics"]
    assert metrics and max(max(series["step"]) for series in metrics.values()) <= periodic.step
    assert train_run(run.pk) == "succeeded"
    assert_contiguous(run, resumed_at=periodic.step)
    periodic_steps = sorted(Checkpoint.objects.filter(run=run, tag="periodic").values_list("step", flat=True))
    assert periodic_steps == list(range(300, TOTAL, 300))


def test_a_resumed_run_keeps_its_first_start_and_adds_the_interrupted_attempts_time(
        owner_client, trained_run, django_capture_on_commit_callbacks):
    assert trained_run.first_started_at == trained_run.started_at and trained_run.attempts == 1
    # as if it had started an hour ago and been cancelled 100 s later
    first_start = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=trained_run.pk).update(status=Run.Status.CANCELLED, first_started_at=first_start,
                                                 started_at=first_start,
                                                 finished_at=first_start + timedelta(seconds=100))
    with django_capture_on_commit_callbacks(execute=True):
        resume(owner_client, trained_run)
    trained_run.refresh_from_db()
    assert trained_run.earlier_attempts_seconds == 100.0 and trained_run.started_at is None
    assert trained_run.attempts == 1 and trained_run.training_seconds == 100.0
    page = owner_client.get(trained_run.get_absolute_url()).content.decode()
    assert '<dd id="run-duration">1 min 40 s</dd>' in page  # waiting for a worker: not running

    assert train_run(trained_run.pk) == "succeeded"
    trained_run.refresh_from_db()
    assert trained_run.first_started_at == first_start and trained_run.attempts == 2
    assert trained_run.started_at > first_start + timedelta(seconds=100) and trained_run.earlier_attempts_seconds == 100
    Run.objects.filter(pk=trained_run.pk).update(finished_at=trained_run.started_at + timedelta(seconds=23))
    trained_run.refresh_from_db()
    assert trained_run.training_seconds == 123.0
    page = owner_client.get(trained_run.get_absolute_url()).content.decode()
    assert '<dd id="run-duration">2 min 3 s over 2 attempts</dd>' in page
    assert f'<dd id="run-started">{timezone.localtime(first_start):%Y-%m-%d %H:%M:%S}</dd>' in page
    assert 'data-earlier-seconds="100.000" data-attempts="2"' in page  # what run_detail.js adds at the end


def test_a_lost_runs_attempt_ends_at_its_last_heartbeat_not_when_the_reaper_noticed(
        owner_client, trained_run, settings, django_capture_on_commit_callbacks):
    settings.HEARTBEAT_TIMEOUT = 600
    Experiment.objects.filter(pk=trained_run.experiment_id).update(auto_resume=False)  # the user resumes it
    started = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=trained_run.pk).update(status=Run.Status.RUNNING, first_started_at=started,
                                                 started_at=started, heartbeat_at=started + timedelta(seconds=1000),
                                                 finished_at=None)
    assert lifecycle.mark_lost_runs() == 1
    trained_run.refresh_from_db()
    assert trained_run.status == Run.Status.LOST
    assert trained_run.finished_at - trained_run.heartbeat_at > timedelta(minutes=40)
    assert trained_run.training_seconds == 1000.0
    page = owner_client.get(trained_run.get_absolute_url()).content.decode()
    assert '<dd id="run-duration">16 min 40 s</dd>' in page
    with django_capture_on_commit_callbacks(execute=True):
        resume(owner_client, trained_run)
    trained_run.refresh_from_db()
    assert trained_run.earlier_attempts_seconds == 1000.0 and trained_run.first_started_at == started


def test_a_lost_run_without_a_checkpoint_starts_over(owner_client, queued_run, django_capture_on_commit_callbacks):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.LOST, steps_done=120)
    Event.objects.create(run=queued_run, seq=1, kind="started", step=0, time=0.0, values={"start_step": 0})
    Event.objects.create(run=queued_run, seq=2, kind="episode", step=120, time=1.0,
                         values={"rollout/episode_return": 1.0, "rollout/episode_length": 120})
    with django_capture_on_commit_callbacks(execute=True):
        resume(owner_client, queued_run)
    assert train_run(queued_run.pk) == "succeeded"
    queued_run.refresh_from_db()
    assert queued_run.steps_done == queued_run.total_steps and queued_run.start_step == 0
    started = Event.objects.filter(run=queued_run, kind="started")
    assert started.count() == 1 and started.get().seq == 4  # after the forgotten 1 and 2, one apart


def test_a_second_delivery_of_the_resume_exits_at_once(owner_client, trained_run, django_capture_on_commit_callbacks):
    Run.objects.filter(pk=trained_run.pk).update(status=Run.Status.CANCELLED)
    with django_capture_on_commit_callbacks(execute=True):
        resume(owner_client, trained_run)
    assert train_run(trained_run.pk) == "succeeded"
    events = Event.objects.filter(run=trained_run).count()
    assert train_run(trained_run.pk) == "skipped"
    assert Event.objects.filter(run=trained_run).count() == events


@pytest.mark.parametrize("status", ["queued", "running", "succeeded", "failed"])
def test_only_a_cancelled_or_lost_run_can_be_resumed(owner_client, queued_run, live_redis, status):
    Run.objects.filter(pk=queued_run.pk).update(status=status)
    response = owner_client.post(reverse("run-resume", args=[queued_run.pk]), follow=True)
    assert b"Only a cancelled or lost run can be resumed" in response.content
    queued_run.refresh_from_db()
    assert queued_run.status == status and not queued_run.resume_requested
    assert live_redis.llen("cpu") == 0


def test_resume_takes_only_a_post(owner_client, queued_run):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.CANCELLED)
    assert owner_client.get(reverse("run-resume", args=[queued_run.pk])).status_code == 405


def test_a_stranger_cannot_resume(stranger_client, queued_run, live_redis):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.CANCELLED)
    assert resume(stranger_client, queued_run).status_code == 404
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.CANCELLED and live_redis.llen("cpu") == 0


def test_the_run_page_offers_resume_only_when_it_can_be_resumed(owner_client, queued_run):
    url = reverse("run-detail", args=[queued_run.pk])
    assert b'id="resume-form"' not in owner_client.get(url).content
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.LOST)
    assert b'id="resume-form"' in owner_client.get(url).content


def test_a_page_that_drew_the_forgotten_part_of_an_attempt_is_told_to_reload_and_new_events_come_after(
        owner_client, make_experiment, redis_url, django_capture_on_commit_callbacks):
    run = cancelled_midway(make_experiment, redis_url)
    marker = Checkpoint.objects.get(run=run, tag="final").reported_event()
    dead = Event.objects.filter(run=run).order_by("seq").last()  # "finished: cancelled", forgotten at the resume
    assert dead.seq > marker.seq
    with django_capture_on_commit_callbacks(execute=True):
        resume(owner_client, run)
    url = reverse("run-stream", args=[run.pk])
    for last_id in (marker.seq + 1, dead.seq):  # a page that reconnects with an id of the forgotten part
        messages = parse_sse(sse_text(owner_client.get(url, HTTP_LAST_EVENT_ID=str(last_id))))
        assert [message["event"] for message in messages][-1] == "reset" and not events_of(messages)
    assert train_run(run.pk) == "succeeded"
    resumed = read_sse(owner_client.get(url, HTTP_LAST_EVENT_ID=str(marker.seq)))  # drawn up to the checkpoint
    assert resumed[0]["kind"] == "started" and resumed[0]["seq"] > dead.seq  # every new id after every old one
    assert parse_sse(sse_text(owner_client.get(url, HTTP_LAST_EVENT_ID=str(dead.seq))))[-1]["event"] == "reset"


LOST_REASON = re.escape("The worker stopped sending heartbeats (it was stopped or lost its connection). No heartbeat "
                        "for ") + r"60\d s\."


@pytest.mark.parametrize("how, reason", [("reaper", LOST_REASON), ("restart", re.escape(lifecycle.RECLAIMED_ERROR))])
def test_a_lost_and_resumed_runs_log_says_why_its_attempt_was_lost_and_where_it_went_on_from(
        owner_client, queued_run, how, reason, django_capture_on_commit_callbacks):
    started = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING, attempts=1, first_started_at=started,
                                                started_at=started, heartbeat_at=timezone.now() - timedelta(seconds=600),
                                                worker_node="celery@gone")
    with django_capture_on_commit_callbacks(execute=True):  # lost, and resumed by itself (the experiment's default)
        lifecycle.lose(queued_run.pk, 1, lifecycle.LOST_ERROR if how == "reaper" else lifecycle.RECLAIMED_ERROR)
    assert train_run(queued_run.pk) == "succeeded"
    kinds = list(Event.objects.filter(run=queued_run).order_by("seq").values_list("kind", flat=True))
    assert kinds[:2] == ["started", "resumed"]  # the new attempt's log says so right after it starts
    resumed = Event.objects.get(run=queued_run, kind="resumed").values
    # 600 s of silence when it was set up, and the seconds the test took since (a loaded machine: one or more)
    assert re.fullmatch(reason, resumed.pop("reason")), reason
    assert resumed == {"attempt": 1, "interrupted": "lost", "from_step": 0, "checkpoint": None}  # from scratch
    log = owner_client.get(reverse("run-history", args=[queued_run.pk])).json()["log"]
    assert "resumed" in [event["kind"] for event in log]


def test_resume_is_refused_with_why_when_the_owners_storage_is_full(owner_client, queued_run, settings, live_redis):
    settings.STORAGE_QUOTA_MB = 1
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.CANCELLED)
    Checkpoint.objects.create(run=queued_run, tag="final", step=10, file="checkpoints/none.zip", size=2 * 2**20)
    response = owner_client.post(reverse("run-resume", args=[queued_run.pk]), follow=True)
    assert "Your checkpoints and videos take 2.0 MB of the 1.0 MB" in response.content.decode()
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.CANCELLED and not queued_run.resume_requested


def test_resume_is_refused_with_why_when_the_run_asks_for_more_than_the_site_now_allows(owner_client,
                                                                                       make_experiment, live_redis):
    experiment = make_experiment(total_steps=50_000, checkpoint_interval=1)  # launched before the interval bounds
    run = Run.objects.create(experiment=experiment, total_steps=50_000, status=Run.Status.LOST, steps_done=10)
    page = owner_client.post(reverse("run-resume", args=[run.pk]), follow=True).content.decode()
    assert "This run asks for more than this site allows now (checkpoint_interval: must be 0 (off) or at least 50" in page
    assert "Clone its experiment" in page
    run.refresh_from_db()
    assert run.status == Run.Status.LOST
