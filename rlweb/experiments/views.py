"""Pages and endpoints. Every object is fetched through an access helper that answers 404 for other users'."""

from __future__ import annotations

import functools
import logging
import re

import redis
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from trainer.envs import known_env_ids

from rlweb.experiments import lists, live
from rlweb.experiments.forms import ExperimentForm, SignupForm
from rlweb.experiments.models import Experiment, Run

logger = logging.getLogger(__name__)

WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")


def owned_experiment(request, experiment_id: int) -> Experiment:
    return get_object_or_404(Experiment, pk=experiment_id, owner=request.user)


def owned_run(request, run_id: int) -> Run:
    return get_object_or_404(Run.objects.select_related("experiment"), pk=run_id, experiment__owner=request.user)


def whole_number(raw: str, name: str) -> int:
    if not WHOLE_NUMBER.fullmatch(raw.strip()):
        raise ValueError(f"{name} must be a whole number ≥ 0, not {raw[:40]!r}")
    return int(raw)


@functools.cache
def env_ids() -> list[str]:
    return known_env_ids()


@login_not_required
def signup(request):
    if not settings.ALLOW_SIGNUP:
        raise Http404("Sign-up is turned off on this site.")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        login(request, form.save())
        return redirect("experiment-list")
    return render(request, "registration/signup.html", {"form": form})


def experiment_list(request):
    Run.mark_lost_runs()
    query = lists.read_query(request.GET, lists.EXPERIMENT_SORTS, default_sort="-created")
    return list_page(request, "experiments/experiment_list.html", query, lists.EXPERIMENT_SORTS,
                     lists.experiments_for(request.user, query))


def run_list(request):
    """All the user's runs, across experiments."""
    Run.mark_lost_runs()
    query = lists.read_query(request.GET, lists.RUN_SORTS, default_sort="-run")
    return list_page(request, "experiments/run_list.html", query, lists.RUN_SORTS,
                     lists.runs_for(request.user, query))


def list_page(request, template: str, query: lists.ListQuery, sorts: dict, rows):
    for problem in query.problems:
        messages.warning(request, problem)
    return render(request, template, {
        "query": query, "page": lists.page_of(rows, request.GET), "choices": lists.filter_choices(request.user),
        "sort_links": lists.sort_links(request.GET, sorts, query.sort),
        "page_link": lists.page_link_prefix(request.GET)})


def experiment_new(request):
    algorithm = request.POST.get("algorithm") or request.GET.get("algorithm")
    # after a change of algorithm the page reloads with the values typed so far in its query
    form = ExperimentForm(request.POST or None, algorithm=algorithm, initial=request.GET.dict())
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            experiment = form.save(owner=request.user)
            runs = experiment.launch()
        messages.success(request, f"Launched {len(runs)} run{'s' if len(runs) != 1 else ''}.")
        return redirect(experiment)
    return render(request, "experiments/experiment_form.html", {"form": form, "env_ids": env_ids()})


def experiment_clone(request, experiment_id: int):
    """The new-experiment form filled with every value of an experiment, to change a few and launch again."""
    experiment = owned_experiment(request, experiment_id)
    form = ExperimentForm(algorithm=experiment.algorithm, initial=ExperimentForm.initial_from(experiment))
    return render(request, "experiments/experiment_form.html",
                  {"form": form, "env_ids": env_ids(), "cloned_from": experiment})


@require_POST
def experiment_delete(request, experiment_id: int):
    """Delete an experiment with its runs, events, checkpoint and video files. Refused while a run is queued or
    running: cancel those first (a worker would otherwise go on writing files for a deleted run)."""
    experiment = owned_experiment(request, experiment_id)
    active = experiment.runs.filter(status__in=Run.ACTIVE).count()
    if active:
        messages.error(request, f"Not deleted: cancel its queued or running runs first ({active} left).")
        return redirect(experiment)
    run_ids = list(experiment.runs.values_list("pk", flat=True))
    experiment.delete()  # checkpoints and videos take their files with them (models.py signals)
    forget_streams(run_ids)
    messages.success(request, f"Deleted “{experiment.name}” with its runs and their files.")
    return redirect("experiment-list")


def experiment_detail(request, experiment_id: int):
    experiment = owned_experiment(request, experiment_id)
    Run.mark_lost_runs()
    runs = list(experiment.runs.all())
    return render(request, "experiments/experiment_detail.html",
                  {"experiment": experiment, "runs": runs, "active_count": sum(run.is_active for run in runs)})


@require_POST
def run_cancel(request, run_id: int):
    run = owned_run(request, run_id)
    if run.cancel_queued():
        revoke(run.task_id)
        messages.success(request, "Cancelled before it started.")
    elif run.status == Run.Status.RUNNING:
        live.request_stop(run.pk)
        messages.info(request, "Stopping: the run saves a final checkpoint, then ends as cancelled.")
    else:
        messages.info(request, f"This run has already ended ({run.status}).")
    return redirect(run)


@require_POST
def run_resume(request, run_id: int):
    from rlweb.experiments.tasks import resume  # the task module loads Celery: only when needed

    run = owned_run(request, run_id)
    with transaction.atomic():
        resumed = resume(run)
    if resumed:
        messages.success(request, "Queued again: it goes on from its last checkpoint.")
    else:
        messages.info(request, f"Only a cancelled or lost run can be resumed; this one is {run.status}.")
    return redirect(run)


def forget_streams(run_ids: list[int]) -> None:
    """Drop the live streams of deleted runs now rather than when they expire."""
    if not run_ids:
        return
    try:
        live.redis_client().delete(*(live.stream_key(run_id) for run_id in run_ids))
    except redis.RedisError as error:
        logger.warning("cannot delete the streams of runs %s: %s", run_ids, error)


def revoke(task_id: str) -> None:
    """Tell workers to drop a queued task without terminating anything (the claim would skip it anyway)."""
    from rlweb.celery import app

    try:
        app.control.revoke(task_id)
    except Exception as error:  # the broker may be down; the run is already marked cancelled
        logger.warning("cannot revoke task %s: %s", task_id, error)


