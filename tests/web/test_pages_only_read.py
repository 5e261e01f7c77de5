"""Pages only read. A running run whose worker went silent (no heartbeat for HEARTBEAT_TIMEOUT s) is shown lost on
every page the moment it is opened, computed then, with nothing written: the lost-run reaper, a periodic chore
that celery beat sends (tasks.reap_lost_runs), is what marks it lost and resumes it. (The sweep page:
tests/web/test_sweeps.py.)"""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments.models import Run
from rlweb.experiments.tasks import reap_lost_runs
from tests.web.chore_helpers import writes_of


@pytest.fixture
def silent_run(make_experiment, settings) -> Run:
    """A running run whose worker stopped beating a while ago; it would resume by itself once marked lost."""
    stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 5)
    return Run.objects.create(experiment=make_experiment(name="gone quiet"), total_steps=400, status="running",
                              attempts=1, started_at=stale, heartbeat_at=stale, steps_done=120)


def read(client, url: str) -> str:
    """GET `url` and return its page, asserting that nothing was written while it was made."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    assert writes_of(queries) == [], f"a GET of {url} wrote"
    return response.content.decode()


@pytest.mark.parametrize("page", ["experiment-list", "run-list", "experiment-detail", "run-detail"])
def test_a_page_shows_a_run_whose_worker_went_silent_as_lost_and_writes_nothing(owner_client, silent_run, page):
    url = {"experiment-list": reverse("experiment-list"), "run-list": reverse("run-list"),
           "experiment-detail": silent_run.experiment.get_absolute_url(),
           "run-detail": silent_run.get_absolute_url()}[page]
    shown = read(owner_client, url)
    if page == "experiment-list":
        assert "1 stopped" in shown and "running</span>" not in shown
    else:
        assert 'class="status status-lost" title="Its worker stopped sending heartbeats' in shown
    assert Run.objects.filter(pk=silent_run.pk, status="running", error="", finished_at=None, auto_resumes=0).exists()


def test_a_run_that_beats_is_shown_running(owner_client, silent_run):
    Run.objects.filter(pk=silent_run.pk).update(heartbeat_at=timezone.now())
    shown = read(owner_client, silent_run.get_absolute_url())
    assert 'class="status status-running">running</span>' in shown


def test_the_chore_marks_it_lost_as_beat_would_send_it(owner_client, silent_run):
    silent_run.experiment.auto_resume = False  # else it is queued again at once (tests/web/test_lifecycle.py)
    silent_run.experiment.save()
    read(owner_client, reverse("run-list"))
    assert reap_lost_runs.apply().get() == 1
    silent_run.refresh_from_db()
    assert silent_run.status == "lost" and "heartbeat" in silent_run.error and silent_run.finished_at
    assert 'class="status status-lost">lost</span>' in read(owner_client, silent_run.get_absolute_url())
