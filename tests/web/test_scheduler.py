"""The fair-share scheduler (scheduler.py): queued runs wait in the database and go to a free worker one at a time,
the user with the fewest running on the queue first, taking turns on a single worker; per-user caps; each queued run's
place and estimated start; a lost message sent again; never two runs for one free worker, even with dispatchers
racing. Workers are real registry entries in the real Redis (no process consumes the messages sent here)."""

from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import checkpoint_jobs, lifecycle, scheduler
from rlweb.experiments.models import Checkpoint, CheckpointJob, QueueLimit, Run
from tests.web.helpers import register_idle_workers


def launch(make_experiment, user, runs: int, **fields) -> list[Run]:
    """`runs` queued runs of a new experiment of `user` (one per seed), waiting: nothing is sent at launch here."""
    return lifecycle.launch(make_experiment(owner=user, num_seeds=runs, **fields))


def sent_messages(live_redis, queue: str = "cpu") -> list[int]:
    """The run ids of the task messages waiting in `queue`, oldest first (kombu pushes on the left)."""
    bodies = [json.loads(message)["body"] for message in reversed(live_redis.lrange(queue, 0, -1))]
    return [json.loads(base64.b64decode(body))[0][0] for body in bodies]


def claim_and_finish(run_id: int, node: str) -> None:
    assert lifecycle.claim(run_id, worker=node) is not None
    Run.objects.filter(pk=run_id).update(status=Run.Status.SUCCEEDED, finished_at=timezone.now())


def test_a_launched_run_waits_in_the_database_until_a_worker_is_free(make_experiment, owner, live_redis):
    run, = launch(make_experiment, owner, 1)
    assert scheduler.dispatch() == [] and live_redis.llen("cpu") == 0  # no worker yet
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.dispatched_at is None and run.task_id
    register_idle_workers("cpu")
    assert scheduler.dispatch() == [run.pk]
    assert sent_messages(live_redis) == [run.pk]
    assert scheduler.dispatch() == []  # the worker is spoken for until it claims the run
    run.refresh_from_db()
    assert run.dispatched_at is not None


def test_two_users_take_turns_on_a_single_worker(make_experiment, owner, stranger, live_redis):
    first = launch(make_experiment, owner, 3)
    second = launch(make_experiment, stranger, 2)  # launched after all of the owner's
    node, = register_idle_workers("cpu")
    expected = [first[0], second[0], first[1], second[1], first[2]]
    assert [place.position for place in map(scheduler.places().get, [run.pk for run in expected])] == [1, 2, 3, 4, 5]
    started = []
    for _ in expected:
        sent = scheduler.dispatch()
        assert len(sent) == 1
        started.append(sent[0])
        claim_and_finish(sent[0], node)
    assert started == [run.pk for run in expected]


def test_a_freed_worker_takes_the_run_of_the_user_with_the_fewest_running(make_experiment, owner, stranger,
                                                                          live_redis):
    busy_node, _ = register_idle_workers("cpu", "cpu")
    owners = launch(make_experiment, owner, 2)
    assert lifecycle.claim(owners[0].pk, worker=busy_node) is not None  # the owner has one running
    strangers = launch(make_experiment, stranger, 1)  # launched after the owner's second run
    assert scheduler.dispatch() == [strangers[0].pk]


def test_a_worker_of_two_queues_takes_one_run_and_a_busy_worker_none(make_experiment, owner, live_redis):
    node, = register_idle_workers("cpu,gpu")
    cpu_run, = launch(make_experiment, owner, 1)
    gpu_run, = launch(make_experiment, owner, 1, device="cuda")
    assert scheduler.dispatch() == [cpu_run.pk]
    assert lifecycle.claim(cpu_run.pk, worker=node) is not None
    assert scheduler.dispatch() == []  # training the cpu run
    Run.objects.filter(pk=cpu_run.pk).update(status=Run.Status.SUCCEEDED)
    assert scheduler.dispatch() == [gpu_run.pk] and sent_messages(live_redis, "gpu") == [gpu_run.pk]


def test_a_users_cap_holds_their_runs_back_and_their_own_limit_replaces_it(make_experiment, owner, stranger,
                                                                           settings, live_redis, owner_client):
    settings.MAX_RUNNING_PER_USER_PER_QUEUE = 1
    register_idle_workers("cpu", "cpu", "cpu")
    runs = launch(make_experiment, owner, 3)
    assert scheduler.dispatch() == [runs[0].pk]  # two workers stay free: the owner is at their cap
    place = scheduler.places()[runs[1].pk]
    assert place.capped and place.position == 2  # after the one sent
    page = owner_client.get(reverse("run-detail", args=[runs[1].pk])).content.decode()
    assert "waits for one of your runs on this queue to end (your cap)" in page
    strangers = launch(make_experiment, stranger, 1)
    assert scheduler.dispatch() == [strangers[0].pk]  # others are not held back by the owner's cap

    QueueLimit.objects.create(user=owner, queue="cpu", max_running=2)
    assert scheduler.dispatch() == [runs[1].pk]
    QueueLimit.objects.filter(user=owner).update(max_running=0)  # 0: no cap for them
    assert scheduler.dispatch() == []  # but no worker is free now
    assert not scheduler.places()[runs[2].pk].capped


def test_a_dispatched_run_not_claimed_in_time_is_sent_again(make_experiment, owner, live_redis):
    register_idle_workers("cpu")
    run, = launch(make_experiment, owner, 1)
    assert scheduler.dispatch() == [run.pk]
    live_redis.delete("cpu")  # Redis restarted and lost the message
    assert scheduler.dispatch() == []  # not yet: it may still be on its way
    Run.objects.filter(pk=run.pk).update(
        dispatched_at=timezone.now() - timedelta(seconds=scheduler.REDISPATCH_SECONDS + 1))
    assert scheduler.dispatch() == [run.pk] and sent_messages(live_redis) == [run.pk]


def test_a_cancelled_waiting_run_is_never_sent(make_experiment, owner, live_redis):
    run, = launch(make_experiment, owner, 1)
    assert lifecycle.cancel(run) == Run.Status.CANCELLED
    register_idle_workers("cpu")
    assert scheduler.dispatch() == [] and live_redis.llen("cpu") == 0


@pytest.mark.django_db(transaction=True)
def test_dispatchers_racing_never_hand_one_free_worker_two_runs(make_experiment, owner, stranger, live_redis):
    launch(make_experiment, owner, 3)  # committed at once here: each launch dispatches, to no worker yet
    launch(make_experiment, stranger, 2)
    register_idle_workers("cpu", "cpu")
    barrier = threading.Barrier(4)
    sent = []

    def dispatcher():
        try:
            barrier.wait()
            sent.extend(scheduler.dispatch())
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == 2 and live_redis.llen("cpu") == 2
    owners = set(Run.objects.filter(pk__in=sent).values_list("experiment__owner__username", flat=True))
    assert owners == {"owner", "stranger"}  # one each: the second free worker goes to the user with none


def test_a_queued_run_shows_its_place_and_an_estimated_start(make_experiment, owner, stranger, owner_client):
    node, = register_idle_workers("cpu")
    now = timezone.now()
    experiment = make_experiment(owner=stranger, total_steps=1000)
    Run.objects.create(experiment=experiment, total_steps=1000, status=Run.Status.RUNNING, worker_node=node,
                       attempts=1, started_at=now - timedelta(seconds=100), heartbeat_at=now, steps_done=500)
    mine = make_experiment(owner=owner, total_steps=2000, num_seeds=2)
    Run.objects.create(experiment=mine, total_steps=2000, status=Run.Status.SUCCEEDED, steps_done=2000, attempts=1,
                       started_at=now - timedelta(seconds=400), first_started_at=now - timedelta(seconds=400),
                       finished_at=now - timedelta(seconds=200))  # 10 steps a second
    waiting = lifecycle.launch(mine)
    places = scheduler.places()
    first, second = places[waiting[0].pk], places[waiting[1].pk]
    assert (first.position, second.position) == (1, 2)
    assert first.starts_in == pytest.approx(100, abs=5)  # when the running run should end, at its speed so far
    assert second.starts_in == pytest.approx(100 + 200, abs=5)  # and after the first's 2,000 steps at 10 a second
    page = owner_client.get(reverse("run-detail", args=[waiting[1].pk])).content.decode()
    assert "#2 in queue <code>cpu</code>, starts in about 5 min" in page
    listing = owner_client.get(reverse("run-list")).content.decode()
    assert "#1 in queue <code>cpu</code>, starts in about" in listing


def test_a_checkpoint_job_goes_to_the_jobs_worker_when_one_is_up(trained_run, live_redis, settings,
                                                                  django_capture_on_commit_callbacks):
    final = trained_run.current_checkpoints().get(tag=Checkpoint.Tag.FINAL)
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_jobs.ask(final, CheckpointJob.Kind.EVALUATE, episodes=1)
    assert live_redis.llen("cpu") == 1 and live_redis.llen(settings.JOBS_QUEUE) == 0  # no jobs worker: the run's
    register_idle_workers(settings.JOBS_QUEUE)
    with django_capture_on_commit_callbacks(execute=True):
        job = checkpoint_jobs.ask(final, CheckpointJob.Kind.EVALUATE, episodes=1)
    assert live_redis.llen(settings.JOBS_QUEUE) == 1
    assert checkpoint_jobs.job_device(trained_run.experiment, settings.JOBS_QUEUE) == "auto"  # what that worker has
    assert checkpoint_jobs.job_device(trained_run.experiment, "cpu") == "cpu"
    assert checkpoint_jobs.do(job.pk, worker="jobs@test", queue=settings.JOBS_QUEUE) == CheckpointJob.Status.SUCCEEDED


def test_a_deployed_jobs_worker_gets_its_jobs_even_while_missing_from_the_registry(trained_run, live_redis, settings,
                                                                                  django_capture_on_commit_callbacks):
    """`make run` and compose deploy a jobs worker: a job never goes behind the training run because that worker's
    registry entry lapsed for a moment (a restart, a late beat on a loaded host); it waits on the jobs queue."""
    settings.JOBS_WORKER_DEPLOYED = True
    final = trained_run.current_checkpoints().get(tag=Checkpoint.Tag.FINAL)
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_jobs.ask(final, CheckpointJob.Kind.EVALUATE, episodes=1)
    assert live_redis.llen(settings.JOBS_QUEUE) == 1 and live_redis.llen("cpu") == 0
