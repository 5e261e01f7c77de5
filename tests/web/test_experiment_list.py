"""The experiment list (`/`): a user sees their own experiments only."""

from django.urls import reverse


def test_it_lists_the_owners_experiments(owner_client, make_experiment):
    make_experiment(name="CartPole sweep")
    response = owner_client.get(reverse("experiment-list"))
    assert response.status_code == 200
    assert b"CartPole sweep" in response.content


def test_it_hides_other_users_experiments(stranger_client, make_experiment):
    make_experiment(name="CartPole sweep")
    response = stranger_client.get(reverse("experiment-list"))
    assert response.status_code == 200
    assert b"CartPole sweep" not in response.content
    assert b"No experiments yet" in response.content


def test_it_marks_runs_whose_worker_went_silent_as_lost(owner_client, queued_run, settings):
    from datetime import timedelta

    from django.utils import timezone

    from rlweb.experiments.models import Run

    stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 5)
    Run.objects.filter(pk=queued_run.pk).update(status="running", heartbeat_at=stale)
    owner_client.get(reverse("experiment-list"))
    queued_run.refresh_from_db()
    assert queued_run.status == "lost" and queued_run.error and queued_run.finished_at
