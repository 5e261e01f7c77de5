"""The training task: the whole path of one run, and what happens when a run is delivered twice."""

import base64
import json

from django.urls import reverse

from rlweb.experiments import redis_keys
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run
from rlweb.experiments.tasks import train_run
from tests.web.helpers import form_data, read_sse, register_idle_workers


def test_a_run_created_in_the_form_trains_and_its_events_reach_redis_the_database_and_the_stream(
        owner_client, live_redis, django_capture_on_commit_callbacks):
    register_idle_workers("cpu")
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data())
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and response["Location"] == experiment.get_absolute_url()
    run = experiment.runs.get()
    assert run.status == Run.Status.QUEUED and run.task_id
    message = json.loads(live_redis.lindex("cpu", 0))
    assert message["headers"]["id"] == run.task_id
    assert json.loads(base64.b64decode(message["body"]))[0] == [run.pk]  # the payload is the run id only

    assert train_run(run.pk) == "succeeded"  # what the worker does with that message

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.steps_done == run.total_steps
    assert run.eval_return_mean is not None and run.finished_at and run.worker_host and run.device_used == "cpu"
    stored = [event.as_dict() for event in Event.objects.filter(run=run)]
    assert [event["seq"] for event in stored] == list(range(1, len(stored) + 1))
    kinds = {event["kind"] for event in stored}
    assert {"started", "episode", "train", "eval", "checkpoint", "finished"} <= kinds
    streamed = [json.loads(fields["event"]) for _, fields in live_redis.xrange(redis_keys.stream_key(run.pk))]
    assert streamed == stored
    assert live_redis.ttl(redis_keys.stream_key(run.pk)) > 0  # a finished run's stream expires
    assert Checkpoint.objects.filter(run=run, tag="final").count() == 1

    url = reverse("run-stream", args=[run.pk])
    assert read_sse(owner_client.get(url)) == stored


def test_a_second_delivery_of_the_same_run_exits_at_once(trained_run):
    events_before = Event.objects.filter(run=trained_run).count()
    assert train_run(trained_run.pk) == "skipped"
    trained_run.refresh_from_db()
    assert trained_run.status == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=trained_run).count() == events_before


def test_a_run_that_is_already_running_is_not_started_again(queued_run):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING)
    assert train_run(queued_run.pk) == "skipped"
    assert not Event.objects.filter(run=queued_run).exists()


def test_a_missing_run_is_skipped(db):
    assert train_run(987654) == "skipped"


def test_a_run_that_cannot_start_fails_with_its_error_and_ends_the_stream(make_experiment, owner_client):
    experiment = make_experiment(hyperparameters={"batch_size": 5000, "buffer_size": 1000})
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=100)
    assert train_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "batch_size" in run.error and run.traceback
    events = read_sse(owner_client.get(reverse("run-stream", args=[run.pk])))
    assert [event["kind"] for event in events] == ["failed"]
    assert events[0]["values"]["error"] == run.error
