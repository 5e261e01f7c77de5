"""Races, with real threads hitting the database at the same moment: every change of a run's status is one
conditional update, so no cancel is lost, no queued run is deleted, and a form posted twice makes one experiment."""

import random
import threading
import time

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment, Run
from tests.web.helpers import form_data, register_idle_workers

pytestmark = pytest.mark.django_db(transaction=True)

TRIES = 12


def race(*calls) -> list:
    """Start `calls` in threads at the same moment; their results, in order (an exception is raised here)."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait()
            time.sleep(random.uniform(0, 0.01))  # either may come first, on any database
            results[index] = call()
        except BaseException as error:  # noqa: BLE001: handed to the test below
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(index, call)) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def test_a_cancel_pressed_while_a_worker_claims_the_run_is_never_lost(make_experiment):
    experiment = make_experiment()
    claimed_first = 0
    for _ in range(TRIES):
        run = Run.objects.create(experiment=experiment, total_steps=100, task_id="task")
        outcome, claimed = race(lambda: lifecycle.cancel(run), lambda: lifecycle.claim(run.pk, "celery@box"))
        run.refresh_from_db()
        if claimed is None:  # the cancel came first: the run never starts
            assert (outcome, run.status) == ("cancelled", "cancelled")
        else:  # the claim came first: the worker is told to stop (the heartbeat reads the flag)
            assert (outcome, run.status, run.stop_requested) == ("stopping", "running", True)
            claimed_first += 1
    print(f"claim first in {claimed_first} of {TRIES}")


def test_a_resume_and_a_delete_at_the_same_moment_never_delete_a_queued_run(make_experiment, live_redis):
    deleted = 0
    for _ in range(TRIES):
        experiment = make_experiment()
        ended = timezone.now()
        run = Run.objects.create(experiment=experiment, total_steps=100, status="cancelled", attempts=1,
                                 started_at=ended - timezone.timedelta(seconds=10), finished_at=ended)
        resumed, active = race(lambda: lifecycle.resume(run), lambda: lifecycle.delete_experiment(experiment))
        if Experiment.objects.filter(pk=experiment.pk).exists():  # the resume came first: the delete refused
            assert resumed and active == 1 and Run.objects.get(pk=run.pk).status == "queued"
        else:  # the delete came first: nothing left to resume, nothing queued
            assert not resumed and active == 0
            deleted += 1
    print(f"delete first in {deleted} of {TRIES}")


def test_three_reapers_at_once_lose_and_resume_each_run_once(make_experiment, settings, live_redis):
    experiment = make_experiment()
    stale = timezone.now() - timezone.timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 1)
    runs = [Run.objects.create(experiment=experiment, total_steps=100, status="running", attempts=1,
                               started_at=stale, heartbeat_at=stale) for _ in range(5)]
    register_idle_workers(*["cpu"] * len(runs))
    counts = race(lifecycle.reap_lost_runs, lifecycle.reap_lost_runs, lifecycle.reap_lost_runs)
    assert sum(counts) == len(runs)
    assert set(Run.objects.values_list("status", "auto_resumes")) == {("queued", 1)}
    assert live_redis.llen("cpu") == len(runs)  # one message each


def test_a_form_posted_twice_at_the_same_moment_makes_one_experiment(owner, live_redis):
    register_idle_workers("cpu", "cpu")
    data = form_data(submission_token="9f1c0e5b7a2d4e3f8b6a1c0d2e4f6a8b")

    def post():
        client = Client()
        client.force_login(owner)
        return client.post(reverse("experiment-new"), data)

    responses = race(post, post)
    experiment = Experiment.objects.get()
    assert [response.status_code for response in responses] == [302, 302]
    assert {response["Location"] for response in responses} == {experiment.get_absolute_url()}
    assert experiment.runs.count() == 1 and live_redis.llen("cpu") == 1
