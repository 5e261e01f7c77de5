"""Redis down at the web side (a deployment with Redis on its own, restarted or unreachable for a while): the
database is the truth. Cancel still answers and reaches the worker, an experiment launched meanwhile keeps its
runs queued, and the lost-run reaper sends them once Redis is back."""

import time

import kombu.pools
import pytest
from django.urls import reverse

from rlweb.celery import app
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment, Run
from rlweb.settings import broker_url
from tests.conftest import RedisServer
from rlweb.experiments.tasks import dispatch_runs
from tests.web.helpers import form_data, register_idle_workers


def use_broker(url: str) -> None:
    """Point the Celery app's connections at `url` (it keeps a pool of them)."""
    app.conf.broker_url = broker_url(url)
    kombu.pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def own_redis(settings, celery_on_test_redis):
    server = RedisServer().start()
    previous = app.conf.broker_url
    settings.REDIS_URL = server.url
    use_broker(server.url)
    yield server
    use_broker(previous)
    server.remove()


def test_cancel_while_redis_is_down_answers_and_the_database_flag_stops_the_run(owner_client, queued_run,
                                                                                 own_redis):
    running = Run.objects.filter(pk=queued_run.pk)
    running.update(status="running", attempts=1)
    own_redis.stop()
    started = time.monotonic()
    response = owner_client.post(reverse("run-cancel", args=[queued_run.pk]), follow=True)
    assert response.status_code == 200 and b"Stopping" in response.content
    assert time.monotonic() - started < 5
    assert running.get().stop_requested  # the heartbeat passes it on (tests/web/test_heartbeat.py)


def test_a_queued_run_cancelled_while_redis_is_down_ends_cancelled(owner_client, queued_run, own_redis):
    own_redis.stop()
    started = time.monotonic()
    response = owner_client.post(reverse("run-cancel", args=[queued_run.pk]), follow=True)
    assert response.status_code == 200 and b"Cancelled before it started" in response.content
    assert time.monotonic() - started < 10
    assert Run.objects.get(pk=queued_run.pk).status == "cancelled"


def test_an_experiment_launched_while_redis_is_down_stays_queued_and_is_sent_when_it_is_back(
        owner_client, own_redis, django_capture_on_commit_callbacks):
    own_redis.stop()
    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data(num_seeds="2"))
    waited = time.monotonic() - started
    assert response.status_code == 302 and waited < 10
    experiment = Experiment.objects.get()
    assert set(experiment.runs.values_list("status", "send_failed", "error")) == {("queued", True, "")}
    assert dispatch_runs() == 0  # still down: they stay queued
    assert set(experiment.runs.values_list("status", "send_failed")) == {("queued", True)}

    own_redis.start()
    register_idle_workers("cpu", "cpu")  # the workers write their registry entries again
    assert dispatch_runs() == 2  # what beat does every 5 s
    assert set(experiment.runs.values_list("status", "send_failed")) == {("queued", False)}
    assert own_redis.client().llen("cpu") == 2
    print(f"the launch answered in {waited:.2f} s with Redis down")


def test_a_run_resumed_while_redis_is_down_is_sent_when_it_is_back(owner_client, queued_run, own_redis,
                                                                  django_capture_on_commit_callbacks):
    Run.objects.filter(pk=queued_run.pk).update(status="cancelled")
    own_redis.stop()
    with django_capture_on_commit_callbacks(execute=True):
        assert owner_client.post(reverse("run-resume", args=[queued_run.pk])).status_code == 302
    queued_run.refresh_from_db()
    assert (queued_run.status, queued_run.resume_requested, queued_run.send_failed) == ("queued", True, True)
    own_redis.start()
    register_idle_workers("cpu")
    dispatch_runs()
    assert own_redis.client().llen("cpu") == 1 and not Run.objects.get(pk=queued_run.pk).send_failed
