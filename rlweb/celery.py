"""The Celery app. Start a training worker with one process per run:

    celery -A rlweb worker --pool solo -Q cpu,gpu

Every CELERY_* setting in rlweb/settings.py configures it (late acks, prefetch one, a broker visibility
timeout above the longest run, json only, results ignored).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

app = Celery("rlweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
