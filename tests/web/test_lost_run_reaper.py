"""The periodic chores: celery beat sends each on its own (rlweb/celery.py). The lost-run reaper
(`rlweb.reap_lost_runs`, lifecycle.reap_lost_runs) marks runs whose heartbeat went stale as lost, without anyone
opening a page. (tests/e2e/test_experiment_flows.py sees it happen in the real stack; tests/web/test_lifecycle.py
covers what follows: the automatic resume; tests/web/test_pages_only_read.py that pages leave it to the chore.)"""

from datetime import timedelta

from django.utils import timezone

from rlweb.alerts.tasks import resend_alerts
from rlweb.celery import ALERT_CHORE_SECONDS, LOST_RUN_REAP_SECONDS, app
from rlweb.experiments.models import Run
from rlweb.experiments.tasks import dispatch_runs, fail_stale_checkpoint_jobs, reap_lost_runs
from rlweb.suites.tasks import advance_suites
from rlweb.sweeps.tasks import advance_sweeps


def test_beat_sends_each_chore_on_its_own_and_drops_those_that_waited_too_long(settings):
    schedule = app.conf.beat_schedule
    tasks = {name: entry["task"] for name, entry in schedule.items()}
    assert tasks == {"reap-lost-runs": reap_lost_runs.name, "advance-sweeps": advance_sweeps.name,
                     "fail-stale-checkpoint-jobs": fail_stale_checkpoint_jobs.name,
                     "dispatch-runs": dispatch_runs.name, "advance-suites": advance_suites.name,
                     "resend-alerts": resend_alerts.name}
    assert all(task in app.tasks for task in tasks.values())
    assert schedule["reap-lost-runs"]["schedule"] == LOST_RUN_REAP_SECONDS == 10 < settings.HEARTBEAT_TIMEOUT
    assert schedule["dispatch-runs"]["schedule"] == 5  # the scheduler's safety net: a waiting run starts soon
    for name, entry in schedule.items():
        assert entry["schedule"] == {"dispatch-runs": 5, "resend-alerts": ALERT_CHORE_SECONDS}.get(name, 10)
        assert entry["options"]["expires"] == entry["schedule"]  # none pile up behind a long run


def test_the_reaper_marks_only_running_runs_with_a_stale_heartbeat_as_lost(make_experiment, settings):
    experiment = make_experiment(auto_resume=False)
    now = timezone.now()
    stale = now - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 1)

    def run(status, heartbeat_at):
        return Run.objects.create(experiment=experiment, total_steps=10, status=status, heartbeat_at=heartbeat_at)

    silent, beating, queued, done = run("running", stale), run("running", now), run("queued", None), \
        run("succeeded", stale)
    assert reap_lost_runs.apply().get() == 1  # the task as a worker runs it
    statuses = dict(Run.objects.values_list("pk", "status"))
    assert statuses == {silent.pk: "lost", beating.pk: "running", queued.pk: "queued", done.pk: "succeeded"}
    silent.refresh_from_db()
    assert silent.finished_at and "heartbeat" in silent.error
