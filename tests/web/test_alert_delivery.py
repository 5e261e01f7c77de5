"""Alerts reach real receivers on 127.0.0.1 (rlweb/alerts): an SMTP server (Django's SMTP backend sends to it) and an
HTTP receiver get exactly one message per event, each webhook signed with the rule's secret; a repeated end or a
redelivered task sends nothing more; a receiver that fails twice gets the third try; a webhook to a private or
loopback address is refused, saying why. The events come from a real tiny run, or through the real sink.
The delivery task runs eagerly, in this process (a short back-off from the settings)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from trainer.events import make_event

from rlweb.alerts.delivery import deliver
from rlweb.alerts.models import Alert, AlertRule, Delivery
from rlweb.alerts.tasks import resend_alerts
from rlweb.alerts.triggers import MetricAlerts
from rlweb.celery import app
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Event
from rlweb.experiments.sink import worker_sink
from rlweb.experiments.tasks import train_run
from tests.web.alert_helpers import Receiver, SmtpServer, free_port, signed_by

EMAIL = "owner@example.org"


@pytest.fixture
def smtp(settings):
    server = SmtpServer().start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"  # pytest-django's default keeps mail
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    yield server.inbox
    server.stop()


@pytest.fixture
def receiver(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the test's receiver is on 127.0.0.1
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def eager_tasks(settings):
    settings.ALERT_RETRY_SECONDS = 0.01
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_a_finished_run_sends_one_email_and_one_signed_webhook_per_event(
        owner, queued_run, smtp, receiver, django_capture_on_commit_callbacks):
    rule = AlertRule.objects.create(owner=owner, on_end=["succeeded", "failed"], threshold_metric="eval/return_mean",
                                    threshold_value=1.0, email=EMAIL, webhook_url=receiver.url)
    with django_capture_on_commit_callbacks(execute=True):
        assert train_run(queued_run.pk) == "succeeded"  # a real tiny DQN run: its evaluations pass 1.0

    assert sorted(Alert.objects.values_list("kind", flat=True)) == ["succeeded", "threshold"]
    assert len(smtp.messages) == 2 and smtp.recipients == [[EMAIL], [EMAIL]]
    subjects = sorted(message["Subject"] for message in smtp.messages)
    assert "eval/return_mean" in subjects[0] and subjects[1].endswith(f"run {queued_run.pk}) succeeded")
    assert len(receiver.posts) == 2
    assert all(signed_by(rule.webhook_secret, headers, body) for headers, body in receiver.posts)
    assert not signed_by("another secret", *receiver.posts[0])
    bodies = {body["kind"]: body for body in receiver.bodies()}
    assert bodies["succeeded"]["run"]["id"] == queued_run.pk and bodies["succeeded"]["run"]["status"] == "succeeded"
    assert bodies["threshold"]["details"]["metric"] == "eval/return_mean"
    assert bodies["threshold"]["details"]["value"] >= 1.0

    # the same end announced again, and every delivery's task delivered again: nothing more is sent
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.announce_end(queued_run.pk)
    for delivery in Delivery.objects.all():
        assert deliver(delivery.pk) is None
    assert (len(smtp.messages), len(receiver.posts), Alert.objects.count()) == (2, 2, 2)
    assert set(Delivery.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_a_nan_metric_and_a_threshold_reported_through_the_sink_are_told_once_each(
        owner, queued_run, smtp, django_capture_on_commit_callbacks):
    AlertRule.objects.create(owner=owner, on_nan=True, threshold_metric="train/loss", threshold_direction="below",
                             threshold_value=0.5, email=EMAIL)
    sink = worker_sink(queued_run)
    assert any(isinstance(watcher, MetricAlerts) for watcher in sink.watchers)
    with django_capture_on_commit_callbacks(execute=True):
        for step, loss in ((100, 0.7), (104, float("nan")), (108, float("inf")), (112, 0.4), (116, 0.3)):
            sink.emit(make_event("train", step, step / 100, {"train/loss": loss, "train/q_mean": 1.0}))
        sink.close()

    assert sorted(smtp.messages[i]["Subject"] for i in range(len(smtp.messages))) == [
        f"[rlweb] tiny (seed 0, run {queued_run.pk}): train/loss = 0.4 falls to or below 0.5",
        f"[rlweb] tiny (seed 0, run {queued_run.pk}): train/loss became NaN or infinite"]
    nan = Alert.objects.get(kind="nan")
    assert nan.details == {"step": 104, "metrics": ["train/loss"]}
    stored = Event.objects.get(run=queued_run, step=104)
    assert stored.values["train/loss"] is None  # the sink still stores NaN as null


def test_a_run_without_metric_rules_gets_no_watcher(owner, queued_run):
    AlertRule.objects.create(owner=owner, on_end=["failed"], email=EMAIL)
    assert not any(isinstance(watcher, MetricAlerts) for watcher in worker_sink(queued_run).watchers)


def test_a_receiver_that_fails_twice_gets_the_third_try(
        owner, trained_run, receiver, django_capture_on_commit_callbacks):
    rule = AlertRule.objects.create(owner=owner, on_end=["succeeded"], webhook_url=receiver.url)
    receiver.plan = [500, 503]
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.announce_end(trained_run.pk)

    assert len(receiver.posts) == 3
    assert len({headers["x-rlweb-delivery"] for headers, _ in receiver.posts}) == 1  # one delivery, three tries
    assert len({body for _, body in receiver.posts}) == 1
    assert all(signed_by(rule.webhook_secret, headers, body) for headers, body in receiver.posts)
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("sent", 3)
    tries = list(delivery.tries.values_list("number", "ok", "status_code"))
    assert tries == [(1, False, 500), (2, False, 503), (3, True, 200)]
    assert "next try in 0.01 s" in delivery.tries.get(number=1).detail
    assert "next try in 0.02 s" in delivery.tries.get(number=2).detail  # the back-off doubles


def test_a_receiver_that_always_fails_is_given_up_after_the_last_try(
        owner, trained_run, receiver, settings, django_capture_on_commit_callbacks):
    settings.ALERT_MAX_ATTEMPTS = 2
    AlertRule.objects.create(owner=owner, on_end=["succeeded"], webhook_url=receiver.url)
    receiver.plan = [500] * 5
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.announce_end(trained_run.pk)
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, len(receiver.posts)) == ("failed", 2, 2)
    assert "no more tries after 2" in delivery.tries.get(number=2).detail


def test_a_webhook_that_became_private_is_refused_at_send_time_with_why(
        owner, trained_run, receiver, settings, django_capture_on_commit_callbacks):
    AlertRule.objects.create(owner=owner, on_end=["succeeded"], webhook_url=receiver.url)  # saved while allowed
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.announce_end(trained_run.pk)
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, receiver.posts) == ("refused", 1, [])
    assert "127.0.0.1 is a loopback address" in delivery.tries.get().detail


def test_a_delivery_whose_task_was_lost_is_sent_again_by_the_chore(owner, trained_run, receiver):
    AlertRule.objects.create(owner=owner, on_end=["succeeded"], webhook_url=receiver.url)
    lifecycle.announce_end(trained_run.pk)  # its task is never sent (the test's transaction never commits)
    assert (Delivery.objects.get().status, receiver.posts) == ("pending", [])
    assert resend_alerts() == 0  # not overdue yet: its task may only be late
    Delivery.objects.update(next_try_at=timezone.now() - timedelta(minutes=11))
    assert resend_alerts() == 1
    assert (Delivery.objects.get().status, len(receiver.posts)) == ("sent", 1)
    Delivery.objects.update(next_try_at=timezone.now() - timedelta(minutes=11))
    assert resend_alerts() == 0 and len(receiver.posts) == 1  # sent: never again


def test_a_mail_server_that_does_not_answer_fails_each_try_until_the_last(
        owner, trained_run, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens there
    settings.ALERT_MAX_ATTEMPTS = 2
    type(trained_run.experiment).objects.filter(pk=trained_run.experiment_id).update(name="two\nlines")
    AlertRule.objects.create(owner=owner, on_end=["succeeded"], email=EMAIL)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.announce_end(trained_run.pk)
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 2)
    assert "ConnectionRefusedError" in delivery.tries.get(number=1).detail
    assert delivery.alert.subject.startswith("two lines (seed 0")  # one line: a header cannot be split
