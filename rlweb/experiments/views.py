"""Pages and endpoints. Every object is fetched through an access helper that answers 404 for other users'."""

from __future__ import annotations

import functools
import logging
import re

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.db import transaction
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from trainer.envs import known_env_ids

from rlweb.experiments import live
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
    experiments = (Experiment.objects.filter(owner=request.user)
                   .annotate(run_count=Count("runs"),
                             active_count=Count("runs", filter=Q(runs__status__in=["queued", "running"]))))
    return render(request, "experiments/experiment_list.html", {"experiments": experiments})


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


def experiment_detail(request, experiment_id: int):
    experiment = owned_experiment(request, experiment_id)
    Run.mark_lost_runs()
    return render(request, "experiments/experiment_detail.html",
                  {"experiment": experiment, "runs": experiment.runs.all()})



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


def revoke(task_id: str) -> None:
    """Tell workers to drop a queued task without terminating anything (the claim would skip it anyway)."""
    from rlweb.celery import app

    try:
        app.control.revoke(task_id)
    except Exception as error:  # the broker may be down; the run is already marked cancelled
        logger.warning("cannot revoke task %s: %s", task_id, error)


