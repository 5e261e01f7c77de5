"""The periodic sweep: celery beat sends `rlweb.mark_lost_runs` (lifecycle.sweep) every 10 s, which marks runs
whose heartbeat went stale as lost, without anyone opening a page. (tests/e2e/test_experiment_flows.py sees it
happen in the real stack; tests/web/test_lifecycle.py covers what follows: the automatic resume.)"""

from datetime import timedelta

from django.utils import timezone

from rlweb.celery import LOST_RUN_SWEEP_SECONDS, app
from rlweb.experiments.models import Run
from rlweb.experiments.tasks import mark_lost_runs


def test_beat_sends_the_sweep_often_and_drops_sweeps_that_waited_too_long(settings):
    entry = app.conf.beat_schedule["mark-lost-runs"]
    assert entry["task"] == mark_lost_runs.name and entry["task"] in app.tasks
    assert entry["schedule"] == LOST_RUN_SWEEP_SECONDS < settings.HEARTBEAT_TIMEOUT
    assert entry["options"]["expires"] == LOST_RUN_SWEEP_SECONDS  # none pile up behind a long run


def test_the_sweep_marks_only_running_runs_with_a_stale_heartbeat_as_lost(make_experiment, settings):
    experiment = make_experiment(auto_resume=False)
    now = timezone.now()
    stale = now - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 1)

    def run(status, heartbeat_at):
        return Run.objects.create(experiment=experiment, total_steps=10, status=status, heartbeat_at=heartbeat_at)

    silent, beating, queued, done = run("running", stale), run("running", now), run("queued", None), \
        run("succeeded", stale)
    assert mark_lost_runs.apply().get() == 1  # the task as a worker runs it
    statuses = dict(Run.objects.values_list("pk", "status"))
    assert statuses == {silent.pk: "lost", beating.pk: "running", queued.pk: "queued", done.pk: "succeeded"}
    silent.refresh_from_db()
    assert silent.finished_at and "heartbeat" in silent.error
