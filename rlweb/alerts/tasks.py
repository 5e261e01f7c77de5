"""The alerts app's Celery tasks. `deliver_alert` lives in delivery.py (which sends it) and is imported here so that
the worker's autodiscovery of tasks modules registers it; `resend_alerts` is a periodic chore (rlweb/celery.py)."""

from rlweb.alerts import delivery
from rlweb.alerts.delivery import deliver_alert  # noqa: F401
from rlweb.celery import app


@app.task(name="rlweb.resend_alerts")
def resend_alerts() -> int:
    """A periodic chore (celery beat, on the jobs queue): alert deliveries whose task was lost are sent again."""
    return delivery.resend_lost()
