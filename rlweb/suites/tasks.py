"""The suites app's side of Celery: its periodic chore (a beat entry in rlweb/celery.py) and the bootstrap of a
large suite's aggregates off the request path.

A suite's waiting tasks start as soon as one of its owner's runs ends, in the process that ended it (the
`run_ended` signal, heard in apps.py); `advance_suites` every 10 s is the safety net.
"""

from __future__ import annotations

import logging

import redis

from rlweb.celery import app
from rlweb.experiments import redis_keys, workers
from rlweb.suites import launching
from rlweb.suites.models import Suite

logger = logging.getLogger(__name__)
PENDING_SECONDS = 300  # a sent bootstrap that never ran (its worker died) is sent again after this


@app.task(name="rlweb.advance_suites")
def advance_suites() -> None:
    """A periodic chore (celery beat): advance every running suite."""
    launching.advance_all()


def pending_key(suite_id: int, score: str) -> str:
    return f"rlweb:suite:{suite_id}:aggregates-sent:{score}"


@app.task(name="rlweb.suite_aggregates", ignore_result=True, time_limit=600)
def suite_aggregates(suite_id: int, score: str) -> None:
    """Bootstrap a large suite's aggregates; the page finds them in the cache (report.aggregates)."""
    from rlweb.suites import report  # scipy and rliable: about 1 s of every worker's start, for this task only

    try:
        suite = Suite.objects.filter(pk=suite_id).first()
        if suite is not None:
            report.aggregates(suite, report.run_rows(suite, report.suite_runs(suite), score), score, inline=True)
    finally:
        redis_keys.redis_client().delete(pending_key(suite_id, score))


def send_aggregates(suite_id: int, score: str) -> None:
    """Send `suite_aggregates` once per suite and score at a time, to the jobs queue where a jobs worker is deployed
    or live (a training run never waits behind it), else to the cpu queue."""
    try:
        if not redis_keys.redis_client().set(pending_key(suite_id, score), "1", nx=True, ex=PENDING_SECONDS):
            return
        suite_aggregates.apply_async((suite_id, score), queue=workers.jobs_queue_or("cpu"))
    except (redis.RedisError, OSError) as error:  # the page says they are not ready, and asks again
        logger.warning("suite %s: cannot send the bootstrap of its aggregates (%s)", suite_id, error)
