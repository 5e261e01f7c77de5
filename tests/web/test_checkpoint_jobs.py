"""Jobs on a checkpoint from the run page (rlweb/experiments/checkpoint_jobs.py): evaluate it for N episodes or
record a video of it, sent to the run's own queue and done by the real task function; the result shows on the
page. Bad input is refused next to its field with nothing queued; strangers get a 404."""

from __future__ import annotations

import base64
import json
import re
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import checkpoint_jobs, history
from rlweb.experiments.models import Checkpoint, CheckpointJob, Run, Video
from rlweb.experiments.sink import RedisSink
from rlweb.experiments.tasks import checkpoint_job, train_run

JSON = {"HTTP_ACCEPT": "application/json"}


def queued_jobs(live_redis, queue: str) -> list[int]:
    """The job ids of the checkpoint-job messages waiting in `queue`."""
    messages = [json.loads(raw) for raw in live_redis.lrange(queue, 0, -1)]
    return [json.loads(base64.b64decode(message["body"]))[0][0] for message in messages
            if message["headers"]["task"] == checkpoint_jobs.JOB_TASK]


def job_task_ids(live_redis, queue: str) -> list[str]:
    """The task ids of the checkpoint-job messages waiting in `queue`."""
    return [json.loads(raw)["headers"]["id"] for raw in live_redis.lrange(queue, 0, -1)
            if json.loads(raw)["headers"]["task"] == checkpoint_jobs.JOB_TASK]


def ask(client, run: Run, commit, **data):
    with commit(execute=True):
        return client.post(reverse("run-jobs", args=[run.pk]), data, **JSON)


@pytest.fixture
def final(trained_run) -> Checkpoint:
    return Checkpoint.objects.get(run=trained_run, tag="final")


def test_evaluating_a_checkpoint_gives_the_return_its_policy_gets_and_shows_it_on_the_run_page(
        owner_client, trained_run, final, live_redis, django_capture_on_commit_callbacks):
    response = ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk,
                   kind="evaluate", episodes="5")
    assert response.status_code == 200, response.content
    job = CheckpointJob.objects.get()
    assert (job.checkpoint, job.kind, job.episodes, job.status) == (final, "evaluate", 5, "queued")
    assert queued_jobs(live_redis, "cpu") == [job.pk]  # the run's queue
    fragment = owner_client.get(reverse("run-jobs", args=[trained_run.pk])).content.decode()
    assert 'data-unfinished="1"' in fragment and "waits for a worker of queue <code>cpu</code>" in fragment

    assert checkpoint_job(job.pk) == "succeeded"
    job.refresh_from_db()
    expected = final.load_agent().evaluate(episodes=5)  # the same seed: the same episodes
    assert job.result["returns"] == expected["returns"] and len(job.result["returns"]) == 5
    assert job.result["mean"] == pytest.approx(expected["mean"]) and job.finished_at >= job.started_at
    page = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    assert f"return <strong>{expected['mean']:.2f} ± {expected['std']:.2f}</strong>" in page
    assert 'data-unfinished="0"' in page
    assert checkpoint_job(job.pk) == "skipped"  # a second delivery does nothing


def test_a_video_of_a_checkpoint_is_stored_with_the_runs_videos_and_plays_from_the_page(
        owner_client, trained_run, final, django_capture_on_commit_callbacks):
    assert ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk,
               kind="video").status_code == 200
    job = CheckpointJob.objects.get()
    assert job.episodes == 1
    assert checkpoint_job(job.pk) == "succeeded"
    job.refresh_from_db()
    video = Video.objects.get(pk=job.video_id)
    assert (video.run, video.step, video.episode_return) == (trained_run, final.step, job.result["episode_return"])
    assert job.result["length"] > 0
    content = b"".join(owner_client.get(reverse("video-file", args=[video.pk])).streaming_content)
    assert content[4:8] == b"ftyp"
    page = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    assert f'src="{reverse("video-file", args=[video.pk])}"' in page


def test_a_job_goes_to_the_named_queue_of_its_run(owner_client, make_experiment, settings, live_redis,
                                                  django_capture_on_commit_callbacks):
    settings.NAMED_QUEUES = ["host-a"]
    experiment = make_experiment(device="host-a")
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="t-host-a")
    checkpoint = Checkpoint.objects.create(run=run, tag="periodic", step=100, file="checkpoints/x.zip")
    assert ask(owner_client, run, django_capture_on_commit_callbacks, checkpoint=checkpoint.pk,
               kind="evaluate", episodes="1").status_code == 200
    assert queued_jobs(live_redis, "host-a") == [CheckpointJob.objects.get().pk]
    assert queued_jobs(live_redis, "cpu") == []


CHOOSE_AGAIN = ("Choose one of this run's checkpoints (a new best or final one replaces the one before: the list "
                "shows it now).")


@pytest.mark.parametrize("data, field, message", [
    (dict(kind="evaluate", episodes="0"), "episodes", "Ensure this value is greater than or equal to 1."),
    (dict(kind="evaluate", episodes="101"), "episodes", "Ensure this value is less than or equal to 100."),
    (dict(kind="evaluate", episodes="ten"), "episodes", "Enter a whole number."),
    (dict(kind="evaluate", episodes=""), "episodes", "How many episodes: 1 to 100."),
    (dict(kind="train", episodes="3"), "kind", "Select a valid choice. train is not one of the available choices."),
    (dict(checkpoint="other", kind="video"), "checkpoint", CHOOSE_AGAIN),
    (dict(checkpoint="999999", kind="video"), "checkpoint", CHOOSE_AGAIN),
])
def test_bad_input_is_refused_next_to_its_field_and_nothing_is_queued(
        owner_client, trained_run, final, make_experiment, live_redis, django_capture_on_commit_callbacks,
        data, field, message):
    other_run = Run.objects.create(experiment=make_experiment(name="other"), seed=0, total_steps=1, task_id="o")
    other = Checkpoint.objects.create(run=other_run, tag="final", step=1, file="checkpoints/other.zip")
    data = {"checkpoint": str(final.pk), **data}
    if data["checkpoint"] == "other":
        data["checkpoint"] = str(other.pk)  # the owner's, but another run's
    response = ask(owner_client, trained_run, django_capture_on_commit_callbacks, **data)
    assert response.status_code == 400
    assert response.json() == {"errors": {field: [message]}}
    assert not CheckpointJob.objects.exists() and queued_jobs(live_redis, "cpu") == []


def test_a_run_takes_three_unfinished_jobs_at_a_time(owner_client, trained_run, final,
                                                     django_capture_on_commit_callbacks):
    for _ in range(checkpoint_jobs.MAX_UNFINISHED_PER_RUN):
        assert ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk,
                   kind="evaluate", episodes="1").status_code == 200
    refused = ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk, kind="video")
    assert refused.status_code == 400 and "3 jobs waiting or running already" in refused.json()["errors"][""][0]
    assert checkpoint_job(CheckpointJob.objects.last().pk) == "succeeded"  # one done: room for another
    assert ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk,
               kind="video").status_code == 200


def test_a_stranger_can_neither_ask_nor_see_jobs(stranger_client, trained_run, final,
                                                 django_capture_on_commit_callbacks):
    assert ask(stranger_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk,
               kind="video").status_code == 404
    assert stranger_client.get(reverse("run-jobs", args=[trained_run.pk])).status_code == 404
    assert not CheckpointJob.objects.exists()


def test_a_plain_form_post_gets_the_run_page_back_with_a_message(owner_client, trained_run, final,
                                                                 django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("run-jobs", args=[trained_run.pk]),
                                     {"checkpoint": final.pk, "kind": "evaluate", "episodes": "2"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("run-detail", args=[trained_run.pk]) + "#checkpoint-jobs"
    assert "Asked: a worker does it" in response.content.decode()
    response = owner_client.post(reverse("run-jobs", args=[trained_run.pk]), {"kind": "evaluate"}, follow=True)
    assert "checkpoint: This field is required." in response.content.decode()


def test_a_job_asked_on_the_final_or_best_checkpoint_acts_on_it_after_the_run_saves_a_newer_one(
        owner_client, trained_run, final, django_capture_on_commit_callbacks, tmp_path):
    """A run replaces its best checkpoint as it trains (and its final when it resumes): the one a job was asked on
    is kept, with its file, for the job, and no longer offered. It was deleted with its jobs, which vanished from
    the page (CI failures of tests/e2e/test_checkpoint_jobs.py: a job asked on "best" was gone seconds later)."""
    ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk, kind="evaluate",
        episodes="2")
    job = CheckpointJob.objects.get()

    sink = RedisSink(trained_run)
    agent, later = final.load_agent(), trained_run.total_steps + 100
    for tag, step in [("best", later), ("best", later + 100), ("final", later + 100)]:
        path = agent.save(tmp_path / f"{tag}-{step}.zip")
        sink.emit({"kind": "checkpoint", "step": step, "time": 1.0, "values": {"path": str(path), "tag": tag,
                                                                               "step": step}})
    sink.close()

    final.refresh_from_db()
    assert final.replaced and final.file.storage.exists(final.file.name)
    assert list(Checkpoint.objects.filter(run=trained_run, tag="best").values_list("step", flat=True)) == [
        later + 100]  # a replaced one that no job was asked on goes
    current = {checkpoint.tag: checkpoint.step for checkpoint in trained_run.current_checkpoints()
               if checkpoint.tag != "periodic"}
    assert current == {"best": later + 100, "final": later + 100}
    offered = [choice.value for choice, _ in checkpoint_jobs.CheckpointJobForm(trained_run).fields["checkpoint"].choices]
    assert final.pk not in offered and len(offered) == trained_run.current_checkpoints().count()
    assert [item["id"] for item in history.checkpoint_list(trained_run)] == [
        checkpoint.pk for checkpoint in trained_run.current_checkpoints()]
    page = owner_client.get(reverse("run-jobs", args=[trained_run.pk])).content.decode()
    assert f'data-job-id="{job.pk}"' in page and f'final <span class="muted">step {final.step}' in page

    assert checkpoint_job(job.pk) == "succeeded"  # on the policy it was asked for
    job.refresh_from_db()
    assert job.checkpoint_id == final.pk
    assert job.result["returns"] == final.load_agent().evaluate(episodes=2)["returns"]
    assert ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk, kind="evaluate",
               episodes="2").status_code == 400  # a replaced checkpoint is not offered for new jobs


def test_a_checkpoint_that_cannot_be_read_fails_its_job_with_the_reason(owner_client, trained_run, final,
                                                                        django_capture_on_commit_callbacks):
    final.file.storage.delete(final.file.name)
    final.file.storage.save(final.file.name, ContentFile(b"not a zip file"))
    ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk, kind="evaluate",
        episodes="1")
    job = CheckpointJob.objects.get()
    assert checkpoint_job(job.pk) == "failed"
    job.refresh_from_db()
    assert job.status == "failed" and "zip" in job.error.lower() and job.finished_at
    page = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    assert '<span class="job-error">' in page


def test_a_job_left_running_by_a_dead_worker_fails_after_an_hour(trained_run, final):
    job = CheckpointJob.objects.create(checkpoint=final, kind="evaluate", episodes=1, status="running",
                                       started_at=timezone.now() - timedelta(minutes=61))
    recent = CheckpointJob.objects.create(checkpoint=final, kind="video", status="running",
                                          started_at=timezone.now() - timedelta(minutes=5))
    assert checkpoint_jobs.fail_stale() == 1
    job.refresh_from_db()
    recent.refresh_from_db()
    assert job.status == "failed" and "within 60 minutes" in job.error and recent.status == "running"


def test_the_page_offers_the_form_only_once_the_run_has_checkpoints(owner_client, queued_run, make_experiment):
    page = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert 'id="checkpoint-job-form" class="checkpoint-job-form" novalidate hidden' in page
    assert train_run(queued_run.pk) == "succeeded"
    page = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert 'id="checkpoint-job-form" class="checkpoint-job-form" novalidate>' in page
    final = Checkpoint.objects.get(run=queued_run, tag="final")
    assert re.search(rf'<option value="{final.pk}"( selected)?>final, step {final.step}</option>', page)


@pytest.mark.parametrize("kind", ["evaluate", "video"])
def test_a_job_that_takes_too_long_is_stopped_and_says_so(trained_run, final, monkeypatch, kind):
    monkeypatch.setattr(checkpoint_jobs, "MAX_SECONDS", 0)  # no time at all: stopped at its first step
    job = CheckpointJob.objects.create(checkpoint=final, kind=kind, episodes=5)
    assert checkpoint_job(job.pk) == "failed"
    job.refresh_from_db()
    assert "longer than 0 minutes" in job.error and job.video is None
    assert not Video.objects.filter(run=trained_run, step=final.step, file__contains="job").exists()


# --- cancelling a job from the page -------------------------------------------------------------------------

def revoked(broadcasts) -> list[str]:
    """The task ids of the revoke commands published to the workers since `broadcasts` subscribed."""
    ids = []
    while (message := broadcasts.get_message(timeout=1)) is not None:
        if message["type"] == "pmessage" and message["channel"].endswith("celery.pidbox"):
            command = json.loads(base64.b64decode(json.loads(message["data"])["body"]))
            if command["method"] == "revoke":
                ids.append(command["arguments"]["task_id"])
    return ids


def cancel(client, run: Run, job: CheckpointJob | None, **headers):
    return client.post(reverse("run-job-cancel", args=[run.pk]), {"job": job.pk} if job else {}, **headers)


def test_a_queued_job_cancelled_from_the_page_ends_at_once_its_message_is_revoked_and_a_worker_skips_it(
        owner_client, trained_run, final, live_redis, django_capture_on_commit_callbacks):
    ask(owner_client, trained_run, django_capture_on_commit_callbacks, checkpoint=final.pk, kind="evaluate",
        episodes="5")
    job = CheckpointJob.objects.get()
    fragment = owner_client.get(reverse("run-jobs", args=[trained_run.pk])).content.decode()
    assert f'action="{reverse("run-job-cancel", args=[trained_run.pk])}" class="job-cancel"' in fragment
    assert f'<input type="hidden" name="job" value="{job.pk}">' in fragment
    broadcasts = live_redis.pubsub()
    broadcasts.psubscribe("*")  # celery's control commands (revoke) are published to the workers' pidbox
    assert revoked(broadcasts) == []

    response = cancel(owner_client, trained_run, job, **JSON)
    assert response.status_code == 200 and response.json() == {"outcome": "cancelled"}
    job.refresh_from_db()
    assert job.status == "cancelled" and job.finished_at and job.started_at is None and not job.stop_requested
    assert revoked(broadcasts) == [checkpoint_jobs.task_id(job.pk)]
    broadcasts.close()
    assert job_task_ids(live_redis, "cpu") == [checkpoint_jobs.task_id(job.pk)]  # the message it revoked
    assert checkpoint_job(job.pk) == "skipped"  # the message a worker may still get does nothing
    job.refresh_from_db()
    assert job.status == "cancelled"
    page = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    assert "cancelled before a worker took it" in page and 'class="job-cancel"' not in page
    assert 'data-unfinished="0"' in page
    # a finished job frees its place: a run takes three unfinished ones at a time
    assert checkpoint_jobs.unfinished(trained_run) == 0


def test_a_running_job_reads_the_cancel_at_its_next_step_and_ends_cancelled_without_a_result(
        owner_client, trained_run, final, monkeypatch):
    job = CheckpointJob.objects.create(checkpoint=final, kind="evaluate", episodes=100)
    asked = {}
    load_agent = Checkpoint.load_agent

    def load_then_cancel(checkpoint, *args, **kwargs):  # the worker has claimed the job: cancel it from the page
        agent = load_agent(checkpoint, *args, **kwargs)
        asked["answer"] = cancel(owner_client, trained_run, job, **JSON).json()
        asked["page"] = owner_client.get(reverse("run-jobs", args=[trained_run.pk])).content.decode()
        steps = agent.predict
        asked["steps"] = 0

        def counted(*args, **kwargs):
            asked["steps"] += 1
            return steps(*args, **kwargs)

        agent.predict = counted
        return agent

    monkeypatch.setattr(Checkpoint, "load_agent", load_then_cancel)
    assert checkpoint_job(job.pk) == "cancelled"
    assert asked["answer"] == {"outcome": "stopping"}
    assert "stopping…" in asked["page"] and 'class="job-cancel"' not in asked["page"]
    assert asked["steps"] == 0  # the flag is read before the first step
    job.refresh_from_db()
    assert (job.status, job.result, job.error, job.stop_requested) == ("cancelled", {}, "", True)
    assert job.finished_at >= job.started_at
    page = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    assert f"cancelled while it ran on {job.worker_node}" in page


@pytest.mark.parametrize("kind", ["evaluate", "video"])
def test_a_running_job_reads_its_cancel_flag_every_quarter_second_between_steps(trained_run, final, monkeypatch,
                                                                                kind):
    job = CheckpointJob.objects.create(checkpoint=final, kind=kind, episodes=100)
    stop_checks = []
    original = checkpoint_jobs.StopCheck.__call__

    def checked(stop):
        answer = original(stop)
        stop_checks.append(stop.read_at)
        if len(stop_checks) == 3:  # the cancel comes after a few steps: read at the first check past the poll
            CheckpointJob.objects.filter(pk=job.pk).update(stop_requested=True)
            monkeypatch.setattr(checkpoint_jobs, "STOP_POLL_SECONDS", 0)
        return answer

    monkeypatch.setattr(checkpoint_jobs, "STOP_POLL_SECONDS", 3600)  # read once, at the first step
    monkeypatch.setattr(checkpoint_jobs.StopCheck, "__call__", checked)
    assert checkpoint_job(job.pk) == "cancelled"
    assert len(stop_checks) == 4 and len(set(stop_checks[:3])) == 1
    assert not Video.objects.filter(run=trained_run, file__contains="job").exists()


def test_cancelling_an_ended_job_changes_nothing(owner_client, trained_run, final):
    job = CheckpointJob.objects.create(checkpoint=final, kind="evaluate", episodes=1)
    assert checkpoint_job(job.pk) == "succeeded"
    assert cancel(owner_client, trained_run, job, **JSON).json() == {"outcome": "ended"}
    job.refresh_from_db()
    assert job.status == "succeeded" and not job.stop_requested


def test_a_stranger_cannot_cancel_a_job_and_a_job_is_cancelled_only_through_its_own_run(
        owner_client, stranger_client, trained_run, final, make_experiment):
    job = CheckpointJob.objects.create(checkpoint=final, kind="video")
    assert cancel(stranger_client, trained_run, job, **JSON).status_code == 404
    other_run = Run.objects.create(experiment=make_experiment(name="other"), seed=0, total_steps=1, task_id="o")
    assert cancel(owner_client, other_run, job, **JSON).status_code == 404
    assert owner_client.get(reverse("run-job-cancel", args=[trained_run.pk])).status_code == 405
    assert cancel(owner_client, trained_run, None, **JSON).status_code == 404
    assert owner_client.post(reverse("run-job-cancel", args=[trained_run.pk]), {"job": "1; drop"}).status_code == 404
    job.refresh_from_db()
    assert job.status == "queued"


def test_the_cancel_button_posts_with_the_pages_csrf_token(owner, trained_run, final):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    job = CheckpointJob.objects.create(checkpoint=final, kind="video")
    assert cancel(client, trained_run, job, **JSON).status_code == 403
    page = client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    form = re.search(r'<form method="post" action="([^"]+)" class="job-cancel">\s*<input type="hidden" '
                     r'name="csrfmiddlewaretoken" value="([^"]+)">\s*<input type="hidden" name="job" value="(\d+)">', page)
    assert form and form[1] == reverse("run-job-cancel", args=[trained_run.pk]) and form[3] == str(job.pk)
    response = client.post(form[1], {"csrfmiddlewaretoken": form[2], "job": form[3]}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("run-detail", args=[trained_run.pk]) + "#checkpoint-jobs"
    assert "Cancelled before a worker took it." in response.content.decode()
    job.refresh_from_db()
    assert job.status == "cancelled"
