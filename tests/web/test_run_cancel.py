"""Cancelling a run: a queued one ends at once, a running one is asked to stop and saves a final checkpoint
(none when it stopped before its first step)."""

from django.urls import reverse

from rlweb.experiments import redis_keys
from rlweb.experiments.models import Checkpoint, Run
from rlweb.experiments.tasks import train_run


def cancel(client, run):
    return client.post(reverse("run-cancel", args=[run.pk]))


def test_a_queued_run_is_cancelled_at_once_and_its_task_then_skips_it(owner_client, queued_run):
    response = cancel(owner_client, queued_run)
    assert response.status_code == 302 and response["Location"] == queued_run.get_absolute_url()
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.CANCELLED and queued_run.finished_at
    assert train_run(queued_run.pk) == "skipped"


def test_a_running_run_gets_the_stop_flag_and_stops_before_training_without_a_checkpoint(owner_client, queued_run,
                                                                                        live_redis):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING)
    response = cancel(owner_client, queued_run)
    assert response.status_code == 302
    assert live_redis.exists(redis_keys.stop_key(queued_run.pk))
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.RUNNING and queued_run.stop_requested  # the worker ends it
    # the worker's side: the run's sink reads the Redis flag (the fast path), and training stops early
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.QUEUED, stop_requested=False)
    assert train_run(queued_run.pk) == "cancelled"
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.CANCELLED and queued_run.steps_done < queued_run.total_steps
    # it stopped before its first step: the weights it was made with are not worth a file (issue 27)
    assert queued_run.steps_done == 0 and not Checkpoint.objects.filter(run=queued_run).exists()


def test_cancelling_a_finished_run_changes_nothing(owner_client, trained_run, live_redis):
    response = owner_client.post(reverse("run-cancel", args=[trained_run.pk]), follow=True)
    assert b"already ended" in response.content
    trained_run.refresh_from_db()
    assert trained_run.status == Run.Status.SUCCEEDED
    assert not live_redis.exists(redis_keys.stop_key(trained_run.pk))


def test_cancel_takes_only_a_post(owner_client, queued_run):
    assert owner_client.get(reverse("run-cancel", args=[queued_run.pk])).status_code == 405
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.QUEUED


def test_a_stranger_cannot_cancel(stranger_client, queued_run, live_redis):
    assert cancel(stranger_client, queued_run).status_code == 404
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING)
    assert cancel(stranger_client, queued_run).status_code == 404
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.RUNNING and not live_redis.exists(redis_keys.stop_key(queued_run.pk))
