"""A suite's tasks become experiments: launched in order (environment by environment) while their owner has room
under the site's limit of queued and running runs (settings.MAX_ACTIVE_RUNS_PER_USER), the rest waiting until runs
end. Each launched task is an ordinary experiment with one run per seed (lifecycle.launch), so its runs wait for a
worker in the fair-share scheduler like any other.

`advance` runs when the suite is made, when one of the owner's runs ends (the `run_ended` signal: room opened), and
as a periodic chore (tasks.py, the safety net). A Redis lock per suite keeps two processes from launching one
task twice; the launch itself is a conditional update of the task's row besides.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.models import Experiment, Run
from rlweb.experiments.forms import default_name
from rlweb.suites.models import Suite, SuiteTask

logger = logging.getLogger(__name__)
LOCK_SECONDS = 120


def advance(suite_id: int) -> None:
    """Launch the suite's waiting tasks that fit, then mark it finished once every task's runs have ended."""
    try:
        lock = redis_keys.redis_client().lock(f"rlweb:suite:{suite_id}:advance", timeout=LOCK_SECONDS,
                                              blocking_timeout=30)
        if not lock.acquire():
            return
    except redis.RedisError as error:
        logger.warning("suite %s: cannot take its lock (%s); it goes on at the next advance", suite_id, error)
        return
    try:
        suite = Suite.objects.filter(pk=suite_id).first()
        if suite is not None:
            advance_locked(suite)
    finally:
        try:
            lock.release()
        except redis.RedisError:  # expired, or Redis went away: the timeout frees it
            pass


def advance_locked(suite: Suite) -> None:
    if suite.status != Suite.Status.RUNNING:
        return
    for task in suite.tasks.filter(launched_at__isnull=True).order_by("position"):
        if Run.active_count(suite.owner_id) + suite.num_seeds > settings.MAX_ACTIVE_RUNS_PER_USER:
            break
        launch_task(suite, task)
    waiting = suite.tasks.filter(launched_at__isnull=True).exists()
    if not waiting and not Run.objects.filter(experiment__suite_task__suite=suite, status__in=Run.ACTIVE).exists():
        Suite.objects.filter(pk=suite.pk, status=Suite.Status.RUNNING).update(
            status=Suite.Status.FINISHED, finished_at=timezone.now())


def launch_task(suite: Suite, task: SuiteTask) -> Experiment | None:
    """The task as an experiment with one run per seed, queued once this commits (None: launched meanwhile)."""
    with transaction.atomic():
        if not SuiteTask.objects.filter(pk=task.pk, launched_at__isnull=True).update(launched_at=timezone.now()):
            return None
        experiment = Experiment.objects.create(
            owner_id=suite.owner_id, project_id=suite.project_id,
            name=f"{suite.name} · {default_name(task.algorithm, task.env_id)}"[:200], algorithm=task.algorithm,
            env_id=task.env_id, hyperparameters=task.hyperparameters, preset=task.preset,
            total_steps=suite.total_steps, eval_interval=suite.eval_interval, eval_episodes=suite.eval_episodes,
            num_seeds=suite.num_seeds, device=suite.device, tags=["suite"],
            description=f"{task.algorithm} on {task.env_id} in the suite “{suite.name}”.")
        SuiteTask.objects.filter(pk=task.pk).update(experiment=experiment)
        lifecycle.launch(experiment)
    return experiment


def advance_after_run(sender, run_id: int, **kwargs) -> None:
    """Receives `run_ended` (connected in apps.py): the run's own suite may be done, and the owner's other
    running suites may have room for a waiting task now."""
    owner_id = Run.objects.filter(pk=run_id).values_list("experiment__owner_id", flat=True).first()
    if owner_id is None:
        return
    for suite_id in Suite.objects.filter(owner_id=owner_id, status=Suite.Status.RUNNING).order_by(
            "created", "id").values_list("pk", flat=True):
        advance(suite_id)


def advance_all() -> None:
    """The periodic chore (tasks.advance_suites): every running suite."""
    for suite_id in Suite.objects.filter(status=Suite.Status.RUNNING).order_by("created", "id").values_list(
            "pk", flat=True):
        try:
            advance(suite_id)
        except Exception:  # one broken suite must not stop the others
            logger.exception("suite %s: cannot advance", suite_id)


def cancel(suite: Suite) -> int:
    """Stop the suite: no waiting task starts, and every queued or running run of its tasks is cancelled (each
    ends with a final checkpoint). Returns how many runs were cancelled."""
    Suite.objects.filter(pk=suite.pk, status=Suite.Status.RUNNING).update(
        status=Suite.Status.CANCELLED, finished_at=timezone.now())
    runs = Run.objects.filter(experiment__suite_task__suite=suite, status__in=Run.ACTIVE).select_related("experiment")
    return sum(lifecycle.cancel(run) != "ended" for run in runs)


def delete(suite: Suite) -> int:
    """Delete an ended suite with its tasks' experiments (their runs, events, checkpoints and videos). Refused while
    it runs or one of its runs is queued or running: returns how many such runs there are (0 once deleted)."""
    if suite.is_active:
        return max(1, Run.objects.filter(experiment__suite_task__suite=suite, status__in=Run.ACTIVE).count())
    for task in suite.tasks.exclude(experiment=None).select_related("experiment"):
        active = lifecycle.delete_experiment(task.experiment)
        if active:
            return active
    suite.delete()
    return 0
