"""The alerts app's Celery task, `deliver_alert`, lives in delivery.py (which sends it): imported here so that the
worker's autodiscovery of tasks modules registers it."""

from rlweb.alerts.delivery import deliver_alert  # noqa: F401
