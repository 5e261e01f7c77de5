"""The heartbeat: a thread of the worker writes it whatever the training loop does, passes on a cancel stored in
the database (Redis down or not), and stops the runner of an attempt that is no longer the run's."""

import time

import pytest
from django.utils import timezone

from rlweb.experiments import lifecycle
from rlweb.experiments.models import Run
from rlweb.experiments.sink import RedisSink

pytestmark = pytest.mark.django_db(transaction=True)  # the thread writes on its own connection


@pytest.fixture
def running_run(queued_run, settings):
    settings.HEARTBEAT_SECONDS = 0.2
    long_ago = timezone.now() - timezone.timedelta(hours=1)
    Run.objects.filter(pk=queued_run.pk).update(status="running", attempts=1, started_at=long_ago,
                                                heartbeat_at=long_ago)
    queued_run.refresh_from_db()
    return queued_run


def heartbeat_at(run) -> timezone.datetime:
    return Run.objects.values_list("heartbeat_at", flat=True).get(pk=run.pk)


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_heartbeat_goes_on_while_the_training_loop_never_polls_and_stops_with_the_run(running_run, settings):
    settings.HEARTBEAT_TIMEOUT = 2  # ten beats (every 0.2 s)
    running_run.experiment.auto_resume = False
    running_run.experiment.save()
    sink = RedisSink(running_run)
    with lifecycle.Heartbeat(running_run, sink) as heartbeat:
        # the first beat opens the thread's own connection: on a loaded machine (CI, load 8) that took over 0.5 s
        assert wait_for(lambda: timezone.now() - heartbeat_at(running_run) < timezone.timedelta(seconds=2))
        # the runner is busy for 3 s, longer than the timeout, without reaching the sink (a long training
        # phase, a stuck env): the beats go on
        for _ in range(6):
            time.sleep(0.5)
            assert timezone.now() - heartbeat_at(running_run) < timezone.timedelta(seconds=2)
            assert lifecycle.mark_lost_runs() == 0
    assert not heartbeat.thread.is_alive()
    # the worker stopped beating (as a dead one does): the reaper sees it after the timeout
    assert wait_for(lambda: lifecycle.mark_lost_runs() == 1, seconds=10)
    assert Run.objects.get(pk=running_run.pk).status == "lost"


def test_a_cancel_stored_while_redis_is_down_reaches_the_runner_through_the_heartbeat(running_run, settings):
    settings.REDIS_URL = "unix:///nonexistent/redis.sock?db=0"  # every Redis call fails
    sink = RedisSink(running_run)
    with lifecycle.Heartbeat(running_run, sink):
        assert lifecycle.cancel(running_run) == "stopping"
        assert Run.objects.get(pk=running_run.pk).stop_requested
        assert wait_for(sink.should_stop, seconds=2)


def test_an_attempt_that_is_no_longer_the_runs_is_asked_to_stop(running_run):
    sink = RedisSink(running_run)
    with lifecycle.Heartbeat(running_run, sink):
        time.sleep(0.5)
        assert not sink.stop_requested
        # the reaper took it as lost and another worker claimed the next attempt
        Run.objects.filter(pk=running_run.pk).update(attempts=2)
        assert wait_for(lambda: sink.stop_requested, seconds=2)
