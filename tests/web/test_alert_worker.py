"""A real Celery worker (in a thread, on the jobs queue of the test Redis) delivers an alert: a receiver that fails
twice gets the third try, each after its back-off, which doubles (RLWEB_ALERT_RETRY_SECONDS, short here)."""

from __future__ import annotations

import time

import pytest
from celery.contrib.testing.worker import start_worker

from rlweb.alerts.models import AlertRule, Delivery
from rlweb.celery import app
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Run
from tests.web.alert_helpers import Receiver, signed_by

BACKOFF = 0.5


@pytest.mark.django_db(transaction=True)  # the worker's thread has a database connection of its own
def test_a_real_worker_gives_a_failing_receiver_its_third_try_after_the_back_off(owner, make_experiment, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    settings.ALERT_RETRY_SECONDS = BACKOFF
    receiver = Receiver().start()
    receiver.plan = [500, 502]
    rule = AlertRule.objects.create(owner=owner, on_end=["failed"], webhook_url=receiver.url)
    run = Run.objects.create(experiment=make_experiment(), seed=0, total_steps=400, status="failed", error="boom")
    try:
        with start_worker(app, queues=[settings.JOBS_QUEUE], perform_ping_check=False, shutdown_timeout=30):
            lifecycle.announce_end(run.pk)  # sends the delivery's task to the jobs queue
            deadline = time.monotonic() + 60
            while Delivery.objects.filter(status="pending").exists() or not Delivery.objects.exists():
                assert time.monotonic() < deadline, list(Delivery.objects.values("status", "attempts"))
                time.sleep(0.1)
    finally:
        receiver.stop()

    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, len(receiver.posts)) == ("sent", 3, 3)
    assert all(signed_by(rule.webhook_secret, headers, body) for headers, body in receiver.posts)
    assert receiver.bodies()[0]["details"]["error"] == "boom"
    tries = list(delivery.tries.order_by("number"))
    assert [(attempt.ok, attempt.status_code) for attempt in tries] == [(False, 500), (False, 502), (True, 200)]
    gaps = [(later.at - earlier.at).total_seconds() for earlier, later in zip(tries, tries[1:])]
    assert gaps[0] >= BACKOFF and gaps[1] >= 2 * BACKOFF, gaps  # the back-off, doubled
