"""The Celery app. Start a training worker with one process per run:

    celery -A rlweb worker --pool solo -Q cpu,gpu

Every CELERY_* setting in rlweb/settings.py configures it (late acks, prefetch one, a broker visibility
timeout above the longest run, json only, results ignored).

One process, and one only, also runs the beat scheduler: `celery -A rlweb beat` (best: a worker busy
with a run cannot take a chore meanwhile), or a worker started with `--beat`. It sends the periodic chores,
one entry each, on the default queue (cpu); each app's tasks.py defines its own:

- `rlweb.reap_lost_runs` (experiments): runs whose heartbeat went stale become `lost`;
- `rlweb.dispatch_runs` (experiments): queued runs go to free workers, fairly among users (scheduler.py; a
  launch, a resume and a worker's end dispatch at once, this is the safety net);
- `rlweb.fail_stale_checkpoint_jobs` (experiments): checkpoint jobs left running by a vanished worker fail;
- `rlweb.resend_alerts` (alerts, on the jobs queue): an alert delivery whose task was lost (the queue was down
  when it was sent, its worker died) is sent again;
- `rlweb.advance_sweeps` (sweeps): trials that ended are told to Optuna and the next ones start (a worker
  also does this as soon as a trial's run ends; this is the safety net);
- `rlweb.advance_suites` (suites): a suite's tasks waiting for room under the user's limit of runs start, and a
  suite whose runs have all ended is marked finished (a worker also does this as soon as a run ends).

Pages only read: none of this happens because someone opened one. A chore that waited longer than its
period expires unrun, so chores never pile up behind a long run.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

app = Celery("rlweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

LOST_RUN_REAP_SECONDS = 10.0
DISPATCH_SECONDS = 5.0
CHECKPOINT_JOB_CHORE_SECONDS = 10.0
SWEEP_CHORE_SECONDS = 10.0
ALERT_CHORE_SECONDS = 60.0


def chore(task: str, seconds: float) -> dict:
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


app.conf.beat_schedule = {
    "reap-lost-runs": chore("rlweb.reap_lost_runs", LOST_RUN_REAP_SECONDS),
    "dispatch-runs": chore("rlweb.dispatch_runs", DISPATCH_SECONDS),
    "fail-stale-checkpoint-jobs": chore("rlweb.fail_stale_checkpoint_jobs", CHECKPOINT_JOB_CHORE_SECONDS),
    "advance-sweeps": chore("rlweb.advance_sweeps", SWEEP_CHORE_SECONDS),
    "advance-suites": chore("rlweb.advance_suites", SWEEP_CHORE_SECONDS),
    # on the jobs queue, whose worker sends the alerts: alert deliveries whose task was lost are sent again
    "resend-alerts": {**chore("rlweb.resend_alerts", ALERT_CHORE_SECONDS),
                      "options": {"expires": ALERT_CHORE_SECONDS, "queue": "jobs"}},
}
