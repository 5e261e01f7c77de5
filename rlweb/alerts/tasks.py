"""The alerts app's Celery task: one delivery of an alert (delivery.py), tried again after its back-off."""

from __future__ import annotations

from rlweb.alerts import delivery
from rlweb.celery import app


@app.task(name=delivery.TASK, bind=True, max_retries=None, time_limit=120)
def deliver_alert(self, delivery_id: int) -> None:
    wait = delivery.deliver(delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait)
