"""The Celery app. Start a training worker with one process per run:

    celery -A rlweb worker --pool solo -Q cpu,gpu

Every CELERY_* setting in rlweb/settings.py configures it (late acks, prefetch one, a broker visibility
timeout above the longest run, json only, results ignored).

One process, and one only, also runs the beat scheduler: `celery -A rlweb beat` (best: a worker busy
with a run cannot take the sweep meanwhile), or a worker started with `--beat`. It sends the periodic sweep
(lifecycle.sweep) that marks runs whose heartbeat went stale as `lost` and sends again the runs whose
sending failed, on the default queue (cpu). Sweeps that waited longer than one period expire unrun, so
they never pile up behind a long run.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

app = Celery("rlweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

LOST_RUN_SWEEP_SECONDS = 10.0
app.conf.beat_schedule = {
    "mark-lost-runs": {"task": "rlweb.mark_lost_runs", "schedule": LOST_RUN_SWEEP_SECONDS,
                       "options": {"expires": LOST_RUN_SWEEP_SECONDS}},
}
