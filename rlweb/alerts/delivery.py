"""Sending an alert, off the request and training path: one Celery task per delivery on the jobs queue
(settings.JOBS_QUEUE, which a worker of its own serves), payload the delivery id.

A try: claim the delivery (a conditional UPDATE on its status and lease, so of two copies of the task only one
sends), send it, log the try (`DeliveryAttempt`: the status the webhook answered, or the error). A failed try is
tried again after a back-off that doubles, ALERT_RETRY_SECONDS, 2x, 4x ... (at most ALERT_MAX_ATTEMPTS tries);
then the delivery is `failed`. A periodic chore (`resend_lost`) sends again the tasks that were lost. A webhook
target on a private or loopback address (targets.py) is `refused`, never tried again. A sent delivery is never
sent again, however often its task comes.

Webhooks: a JSON POST; `X-Rlweb-Signature: sha256=<hex>` is the HMAC-SHA256 of the body with the rule's secret,
`X-Rlweb-Delivery` the delivery id (the same on every try), `X-Rlweb-Event` the alert's kind. Redirects are not
followed (the next URL would be unchecked); any 2xx is success.
Email: Django's email backend (the EMAIL_* settings, RLWEB_EMAIL_* variables).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import smtplib
import socket
import ssl
from datetime import timedelta

import redis
from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as QueueUnreachable

from rlweb.alerts import targets
from rlweb.alerts.models import Delivery, DeliveryAttempt
from rlweb.celery import app

logger = logging.getLogger(__name__)

TASK = "rlweb.deliver_alert"
TIMEOUT_SECONDS = 10.0  # for the webhook's answer or the mail server's
CLAIM = timedelta(seconds=60)  # a try holds its delivery this long (more than TIMEOUT_SECONDS); then another may
MAX_BACKOFF_SECONDS = 3600.0
LOST_AFTER = timedelta(minutes=10)  # a pending delivery this overdue lost its task: the chore sends it again
SIGNATURE_HEADER = "X-Rlweb-Signature"
Status = Delivery.Status


class TryFailed(Exception):
    def __init__(self, detail: str, status_code: int | None = None):
        super().__init__(detail)
        self.status_code = status_code


@app.task(name=TASK, bind=True, max_retries=None, time_limit=120)
def deliver_alert(self, delivery_id: int) -> None:
    """One try at a delivery (`deliver`); the task comes again after the back-off while tries are left."""
    wait = deliver(delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait)


def send(delivery_id: int) -> bool:
    """Queue the delivery's task; False (logged) when the task queue cannot be reached."""
    try:
        deliver_alert.apply_async(args=[delivery_id], queue=settings.JOBS_QUEUE)
    except (redis.RedisError, QueueUnreachable, OSError) as error:
        logger.warning("alert delivery %s: cannot reach the task queue (%s)", delivery_id, error)
        return False
    return True


def resend_lost() -> int:
    """The periodic chore's work: send again each pending delivery whose try is `LOST_AFTER` overdue and that no
    task holds (its task never reached the queue, or its worker died with it). Returns how many. A copy that was
    only late is harmless: the claim lets one try at a time, and a sent delivery is never sent again."""
    now = timezone.now()
    lost = Delivery.objects.filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now), status=Status.PENDING,
                                   next_try_at__lt=now - LOST_AFTER)
    sent = 0
    for delivery_id in list(lost.values_list("pk", flat=True)[:100]):
        if Delivery.objects.filter(pk=delivery_id, next_try_at__lt=now - LOST_AFTER).update(next_try_at=now):
            sent += send(delivery_id)
    return sent


def backoff(tries: int) -> float:
    """Seconds before the next try, after `tries` failed ones."""
    return min(settings.ALERT_RETRY_SECONDS * 2 ** (tries - 1), MAX_BACKOFF_SECONDS)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def payload(delivery: Delivery) -> dict:
    alert = delivery.alert
    run = alert.run
    return {"alert": alert.pk, "kind": alert.kind, "subject": alert.subject, "details": alert.details,
            "created": alert.created.isoformat(),
            "run": {"id": run.pk, "seed": run.seed, "status": run.status, "steps_done": run.steps_done,
                    "url": settings.SITE_URL + run.get_absolute_url()},
            "experiment": {"id": run.experiment_id, "name": run.experiment.name,
                           "url": settings.SITE_URL + run.experiment.get_absolute_url()}}


def deliver(delivery_id: int) -> float | None:
    """One try at the delivery; the seconds to wait before the next try, or None when there is none to make
    (sent, failed for good, refused, or another copy of the task has it)."""
    now = timezone.now()
    claimed = Delivery.objects.filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now), pk=delivery_id,
                                      status=Status.PENDING).update(claimed_until=now + CLAIM)
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("alert__rule", "alert__run__experiment").get(pk=delivery_id)
    number = delivery.attempts + 1
    status_code, status, wait = None, Status.SENT, None
    try:
        status_code, detail = try_once(delivery)
        ok = True
    except targets.TargetRefused as refusal:
        ok, detail, status = False, str(refusal), Status.REFUSED
    except TryFailed as failure:
        ok, detail, status_code = False, str(failure), failure.status_code
        if number < settings.ALERT_MAX_ATTEMPTS:
            status, wait = Status.PENDING, backoff(number)
            detail += f"; next try in {wait:g} s"
        else:
            status = Status.FAILED
            detail += f"; no more tries after {number}"
    DeliveryAttempt.objects.create(delivery=delivery, number=number, ok=ok, status_code=status_code,
                                   detail=detail[:500])
    Delivery.objects.filter(pk=delivery_id).update(
        status=status, attempts=number, claimed_until=None, updated_at=timezone.now(),
        next_try_at=timezone.now() + timedelta(seconds=wait) if wait is not None else None)
    return wait


def try_once(delivery: Delivery) -> tuple[int | None, str]:
    """Send it once: (the webhook's status, what the log says); TryFailed or TargetRefused say why not."""
    try:
        if delivery.channel == Delivery.Channel.EMAIL:
            return send_email(delivery)
        return post_webhook(delivery)
    except (TryFailed, targets.TargetRefused):
        raise
    except Exception as error:  # a misconfigured mail backend, say: logged as a failed try, tried again
        logger.exception("alert delivery %s failed", delivery.pk)
        raise TryFailed(f"{type(error).__name__}: {error}") from None


def send_email(delivery: Delivery) -> tuple[None, str]:
    alert = delivery.alert
    lines = [alert.subject, "", *(f"{key}: {value}" for key, value in alert.details.items() if value not in ("", None)),
             "", f"The run: {settings.SITE_URL}{alert.run.get_absolute_url()}",
             f"Your alerts: {settings.SITE_URL}/account/alerts/"]
    message = EmailMessage(f"[rlweb] {alert.subject}", "\n".join(lines), settings.DEFAULT_FROM_EMAIL,
                           [delivery.target])
    try:
        message.send()
    except (smtplib.SMTPException, OSError) as error:
        raise TryFailed(f"The mail server: {type(error).__name__}: {error}") from None
    return None, "accepted by the mail server"


def post_webhook(delivery: Delivery) -> tuple[int, str]:
    target = targets.check(delivery.target)  # again: the name may resolve elsewhere since the rule was saved
    body = json.dumps(payload(delivery), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "rlweb-alerts",
               SIGNATURE_HEADER: signature(delivery.alert.rule.webhook_secret, body),
               "X-Rlweb-Delivery": str(delivery.pk), "X-Rlweb-Event": delivery.alert.kind}
    connection = targets.connection(target, TIMEOUT_SECONDS)
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(65536)
    except (OSError, ssl.SSLError, socket.timeout) as error:
        raise TryFailed(f"No answer from {target.host}: {type(error).__name__}: {error}") from None
    except Exception as error:  # http.client's own (a malformed answer)
        raise TryFailed(f"A bad answer from {target.host}: {type(error).__name__}: {error}") from None
    finally:
        connection.close()
    if not 200 <= response.status < 300:
        raise TryFailed(f"HTTP {response.status} {response.reason}", response.status)
    return response.status, f"HTTP {response.status} {response.reason}"
