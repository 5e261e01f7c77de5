"""Pages and endpoints. Every object is fetched through an access helper that answers 404 for other users'.
A GET only reads: a running run whose worker went silent is shown lost (Run.shown_status) until the periodic
chore marks it so (tasks.reap_lost_runs)."""

from __future__ import annotations

import functools
import re

import redis
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from trainer.envs import known_env_ids

from rlweb.experiments import lifecycle, lists, queues, storage_use
from rlweb.experiments.live_changes import LiveChangeForm, request_change
from rlweb.experiments.forms import ExperimentForm, preset_fields
from rlweb.experiments.models import Experiment, Run
from rlweb.experiments.notes import NoteForm
from rlweb.logged import runs as logged_runs
from rlweb.projects import access

WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")
LOGGED_ONLY = ("Runs logged from your own script (rlweb_client) are not trained here: only that script can "
               "start, change or continue them.")


def owned_experiment(request, experiment_id: int, edit: bool = False) -> Experiment:
    """The experiment, if the user sees it (their own, or in a project of theirs: else 404); with `edit`, only if
    they may act on it too (else 403). The rule: rlweb/projects/access.py."""
    experiment = get_object_or_404(Experiment.objects.filter(access.visible(request.user)), pk=experiment_id)
    if edit and not access.can_edit(request.user, experiment):
        raise PermissionDenied("A viewer of this project cannot change it: ask its owner to make you an editor.")
    return experiment


def owned_run(request, run_id: int, edit: bool = False) -> Run:
    """The run, under the same rule as its experiment (owned_experiment)."""
    run = get_object_or_404(Run.objects.select_related("experiment").filter(access.visible(request.user,
                                                                                           "experiment__")), pk=run_id)
    if edit and not access.can_edit(request.user, run.experiment):
        raise PermissionDenied("A viewer of this project cannot change it: ask its owner to make you an editor.")
    return run


def whole_number(raw: str, name: str) -> int:
    text = raw.strip()
    if not WHOLE_NUMBER.fullmatch(text):
        raise ValueError(f"{name} must be a whole number ≥ 0, not {raw[:40]!r}")
    return int(text)


@functools.cache
def env_ids() -> list[str]:
    return known_env_ids()


def experiment_list(request):
    query = lists.read_query(request.GET, lists.EXPERIMENT_SORTS, default_sort="-created")
    return list_page(request, "experiments/experiment_list.html", query, lists.EXPERIMENT_SORTS,
                     lists.experiments_for(request.user, query))


def run_list(request):
    """All the user's runs, across experiments."""
    query = lists.read_query(request.GET, lists.RUN_SORTS, default_sort="-run")
    return list_page(request, "experiments/run_list.html", query, lists.RUN_SORTS,
                     lists.runs_for(request.user, query), prepare=queues.mark_queue_places)


def list_page(request, template: str, query: lists.ListQuery, sorts: dict, rows, prepare=None):
    """One page of `rows`; `prepare` (if any) is given the page's objects before they are drawn."""
    for problem in query.problems:
        messages.warning(request, problem)
    page = lists.page_of(rows, request.GET)
    if prepare is not None:
        prepare(page)
    return render(request, template, {
        "query": query, "page": page, "choices": lists.filter_choices(request.user),
        "sort_links": lists.sort_links(request.GET, sorts, query.sort),
        "page_link": lists.page_link_prefix(request.GET)})


def experiment_new(request):
    algorithm = request.POST.get("algorithm") or request.GET.get("algorithm")
    # after a change of algorithm the page reloads with the values typed so far in its query
    form = ExperimentForm(request.POST or None, algorithm=algorithm, initial=request.GET.dict(), owner=request.user)
    if request.method == "POST" and form.is_valid():
        earlier = form.earlier_submission(request.user)
        if earlier:  # the same form posted again (a double click, a reload): the experiment it made
            return redirect(earlier)
        try:
            with transaction.atomic():
                experiment = form.save(owner=request.user)
                runs = lifecycle.launch(experiment)
        except IntegrityError:  # the same form, posted at the same moment, made it first
            earlier = form.earlier_submission(request.user)
            if earlier is None:
                raise
            return redirect(earlier)
        messages.success(request, f"Launched {len(runs)} run{'s' if len(runs) != 1 else ''}.")
        for note in form.run_notes():
            messages.info(request, note)
        return redirect(experiment)
    return render(request, "experiments/experiment_form.html", {"form": form, "env_ids": env_ids()})


def experiment_preset(request):
    """What the form's hyperparameter fields start from for `algorithm` on `env_id` with `preset` (auto, none
    or a name): {"preset", "available" (each {name, description, source, no_equivalent} or null), "values"
    (every field's value as the form shows it)}. The page fills in the fields the user has not changed."""
    try:
        return JsonResponse(preset_fields(request.GET.get("algorithm", ""), request.GET.get("env_id", ""),
                                          request.GET.get("preset", "auto")))
    except ValueError as error:
        return JsonResponse({"error": str(error)}, status=400)


def experiment_clone(request, experiment_id: int):
    """The new-experiment form filled with every value of an experiment, to change a few and launch again."""
    experiment = owned_experiment(request, experiment_id)
    if experiment.is_logged:
        messages.info(request, LOGGED_ONLY)
        return redirect(experiment)
    form = ExperimentForm(algorithm=experiment.algorithm, initial=ExperimentForm.initial_from(experiment))
    return render(request, "experiments/experiment_form.html",
                  {"form": form, "env_ids": env_ids(), "cloned_from": experiment})


@require_POST
def experiment_delete(request, experiment_id: int):
    """Delete an experiment with its runs, events, checkpoint and video files. Refused while a run is queued or
    running: cancel those first."""
    experiment = owned_experiment(request, experiment_id, edit=True)
    active = lifecycle.delete_experiment(experiment)
    if active:
        messages.error(request, f"Not deleted: cancel its queued or running runs first ({active} left).")
        return redirect(experiment)
    messages.success(request, f"Deleted “{experiment.name}” with its runs and their files.")
    return redirect("experiment-list")


def experiment_detail(request, experiment_id: int):
    experiment = owned_experiment(request, experiment_id)
    runs = list(experiment.runs.select_related("logged") if experiment.is_logged else experiment.runs.all())
    movable = access.can_move(request.user, experiment)
    return render(request, "experiments/experiment_detail.html", {
        "experiment": experiment, "runs": runs, "active_count": sum(run.is_active for run in runs),
        "logged_config": logged_runs.shared_config(runs) if experiment.is_logged else None,
        "can_edit": access.can_edit(request.user, experiment),
        "projects": access.editable_projects(request.user) if movable else None})


@require_POST
def experiment_project(request, experiment_id: int):
    """Put the experiment (and so its runs, logged ones too) in one of the owner's projects, or make it private
    (`project` empty). Only its owner may (403 for the project's members)."""
    experiment = owned_experiment(request, experiment_id)
    if not access.can_move(request.user, experiment):
        raise PermissionDenied("Only the experiment's owner chooses who sees it.")
    chosen = request.POST.get("project")
    project = access.editable_projects(request.user).filter(pk=chosen).first() if chosen and chosen.isdigit() else None
    if chosen is None or chosen and project is None:
        messages.error(request, "Choose one of your projects, or none to make it private.")
    else:
        experiment.project = project
        experiment.save(update_fields=["project"])
        messages.success(request, f"Now in the project “{project}”." if project else "Now private: only you see it.")
    return redirect(experiment)


def storage_page(request):
    """What the user's checkpoints and videos take in storage, per experiment, against their quota."""
    used, quota = storage_use.used_bytes(request.user), storage_use.quota_bytes(request.user)
    rows = storage_use.use_by_experiment(request.user)
    for row in rows:
        row.update({f"{key}_text": storage_use.describe(row[key])
                    for key in ("bytes", "checkpoint_bytes", "video_bytes")})
    return render(request, "experiments/storage.html", {
        "rows": rows, "used": storage_use.describe(used), "quota": quota and storage_use.describe(quota),
        "percent": min(100, round(100 * used / quota)) if quota else None,
        "full": storage_use.full_message(request.user)})


@require_POST
def experiment_notes(request, experiment_id: int):
    return save_notes(request, owned_experiment(request, experiment_id, edit=True))


@require_POST
def run_notes(request, run_id: int):
    return save_notes(request, owned_run(request, run_id, edit=True))


def save_notes(request, noted):
    """Store the notes form's text on an experiment or run (the form on its page), then show the page again."""
    form = NoteForm(request.POST)
    if form.is_valid():
        noted.notes = form.cleaned_data["notes"]
        noted.save(update_fields=["notes"])
        messages.success(request, "Notes saved.")
    else:
        for error in form.errors.get("notes", []):
            messages.error(request, f"Notes not saved: {error}")
    return redirect(noted)


@require_POST
def run_cancel(request, run_id: int):
    run = owned_run(request, run_id, edit=True)
    if run.experiment.is_logged and run.is_active:
        logged_runs.cancel(run)
        messages.success(request, "Cancelled: its script hears that the run has ended at its next request.")
        return redirect(run)
    outcome = lifecycle.cancel(run)
    if outcome == Run.Status.CANCELLED:
        messages.success(request, "Cancelled before it started.")
    elif outcome == "stopping":
        messages.info(request, "Stopping: the run saves a final checkpoint, then ends as cancelled.")
    else:
        messages.info(request, f"This run has already ended ({run.status}).")
    return redirect(run)


@require_POST
def run_resume(request, run_id: int):
    run = owned_run(request, run_id, edit=True)
    refusal = None if run.experiment.is_logged or not run.is_resumable else lifecycle.resume_refusal(run)
    if run.experiment.is_logged:
        messages.info(request, LOGGED_ONLY)
    elif refusal:
        messages.error(request, refusal)
    elif lifecycle.resume(run):
        messages.success(request, "Queued again: it goes on from its last checkpoint.")
    else:
        messages.info(request, f"Only a cancelled or lost run can be resumed; this one is {run.status}.")
    return redirect(run)


@require_POST
def run_change(request, run_id: int):
    """Change live hyperparameters of a running run (the form on its page). The page's script gets JSON: the
    recorded change, or the errors by field (400); a plain form post gets a message and the run page back."""
    run = owned_run(request, run_id, edit=True)
    form = None if run.experiment.is_logged else LiveChangeForm(run, request.POST)
    if form is None:
        answer, status = {"error": LOGGED_ONLY}, 409
    elif run.status != Run.Status.RUNNING:
        answer, status = {"error": f"Only a running run takes changes; this one is {run.status}."}, 409
    elif not form.is_valid():
        answer, status = {"errors": {name.removeprefix("hp_") if name != "__all__" else "": list(errors)
                                     for name, errors in form.errors.items()}}, 400
    else:
        try:
            answer, status = {"change": request_change(run, form.cleaned_data["changes"])}, 200
        except redis.RedisError as error:
            answer, status = {"error": f"The worker cannot be reached (Redis: {error}); nothing was changed."}, 503
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(answer, status=status)
    if status == 200:
        messages.success(request, "Sent to the worker: the change takes effect within a second.")
    for text in [answer.get("error")] + [f"{name}: {message}".lstrip(": ") for name, errors in
                                          answer.get("errors", {}).items() for message in errors]:
        if text:
            messages.error(request, text)
    return redirect(run)
