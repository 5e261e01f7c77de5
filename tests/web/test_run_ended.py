"""The `run_ended` signal (rlweb/experiments/signals.py): sent once a run reaches a final state, wherever that
happens (a worker that ends it, a cancel of a queued run, the lost-run reaper), and not for a lost run that
resumes by itself. Other apps listen to it (the sweeps app advances its sweep: tests/web/test_sweeps.py)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from rlweb.experiments import lifecycle
from rlweb.experiments.models import Run
from rlweb.experiments.signals import run_ended
from rlweb.experiments.tasks import train_run


@pytest.fixture
def heard():
    """The (run_id, status) of every `run_ended` sent while the test runs."""
    calls = []

    def listen(sender, run_id, status, **kwargs):
        assert sender is Run
        calls.append((run_id, status))

    run_ended.connect(listen, dispatch_uid="test-listen")
    yield calls
    run_ended.disconnect(dispatch_uid="test-listen")


def silent(run: Run, settings) -> Run:
    stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 1)
    Run.objects.filter(pk=run.pk).update(status="running", attempts=1, started_at=stale, heartbeat_at=stale)
    return run


def test_a_run_its_worker_ends_is_announced_once_with_its_status(queued_run, heard):
    assert train_run(queued_run.pk) == "succeeded"
    assert heard == [(queued_run.pk, "succeeded")]
    assert train_run(queued_run.pk) == "skipped"  # a second delivery: nothing more is announced
    assert heard == [(queued_run.pk, "succeeded")]


def test_a_queued_run_cancelled_is_announced(queued_run, heard):
    assert lifecycle.cancel(queued_run) == "cancelled"
    assert heard == [(queued_run.pk, "cancelled")]
    assert lifecycle.cancel(queued_run) == "ended" and len(heard) == 1


def test_a_lost_run_is_announced_only_when_it_stays_lost(make_experiment, settings, heard):
    stays = silent(Run.objects.create(experiment=make_experiment(auto_resume=False), total_steps=10), settings)
    resumes = silent(Run.objects.create(experiment=make_experiment(), total_steps=10), settings)
    assert lifecycle.reap_lost_runs() == 2
    assert Run.objects.get(pk=resumes.pk).status == "queued"
    assert heard == [(stays.pk, "lost")]


def test_a_receiver_that_fails_neither_fails_the_run_nor_silences_the_others(queued_run, heard, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("a broken receiver")

    run_ended.connect(broken, dispatch_uid="test-broken")
    try:
        assert train_run(queued_run.pk) == "succeeded"
    finally:
        run_ended.disconnect(dispatch_uid="test-broken")
    assert heard == [(queued_run.pk, "succeeded")]
    assert "a broken receiver" in caplog.text
