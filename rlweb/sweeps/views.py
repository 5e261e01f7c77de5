"""Sweep pages: the list, the form, the live page with its data and figures, and the owner's actions (cancel,
extend, launch the best). Every sweep is fetched through `owned_sweep`: 404 for other users' (but a project's members)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_POST

from rlweb.experiments.group_views import cancel_group, delete_group
from rlweb.experiments.views import LOGGED_ONLY, env_ids, owned_experiment
from rlweb.projects import access
from rlweb.sweeps import figures, pbt, study
from rlweb.sweeps.forms import ExtendForm, LaunchBestForm, SweepForm
from rlweb.sweeps.models import Sweep


def owned_sweep(request, sweep_id: int, edit: bool = False) -> Sweep:
    """The sweep, under the experiments' rule (rlweb/projects/access.py): 404 if unseen, 403 to act as a viewer."""
    sweep = get_object_or_404(Sweep.objects.filter(access.visible(request.user)), pk=sweep_id)
    if edit and not access.can_edit(request.user, sweep):
        raise PermissionDenied("A viewer of this project cannot change it: ask its owner to make you an editor.")
    return sweep


def sweep_list(request):
    sweeps = Sweep.objects.filter(access.visible(request.user))
    return render(request, "sweeps/sweep_list.html", {"rows": [figures.summary(sweep) for sweep in sweeps[:200]]})


def sweep_new(request):
    """The form; `?around=N` starts it from experiment N's settings ("sweep around this experiment")."""
    initial = request.GET.dict()
    around = initial.pop("around", "")
    if around.isdigit() and request.method == "GET":
        experiment = owned_experiment(request, int(around))
        if experiment.is_logged:
            messages.info(request, LOGGED_ONLY)
            return redirect(experiment)
        initial = {**SweepForm.initial_from(experiment), **initial}
    algorithm = request.POST.get("algorithm") or initial.get("algorithm")
    form = SweepForm(request.POST or None, algorithm=algorithm, initial=initial, owner=request.user)
    if request.method == "POST" and form.is_valid():
        sweep = form.save(owner=request.user)
        study.create(sweep)
        messages.success(request, f"Sweep started: {sweep.trials} trial{'s' if sweep.trials != 1 else ''}, "
                                  f"{sweep.parallel} at once.")
        return redirect(sweep)
    return render(request, "sweeps/sweep_form.html", {"form": form, "env_ids": env_ids()})


def sweep_detail(request, sweep_id: int):
    sweep = owned_sweep(request, sweep_id)
    if sweep.is_pbt:
        return render(request, "sweeps/pbt_detail.html", {
            "sweep": sweep, "data": pbt.page_data(sweep), "best_form": LaunchBestForm(),
            "space": figures.space_rows(sweep), "searched_names": [item["name"] for item in sweep.space]})
    return render(request, "sweeps/sweep_detail.html", {
        "sweep": sweep, "data": figures.page_data(sweep), "extend_form": ExtendForm(),
        "best_form": LaunchBestForm(), "space": figures.space_rows(sweep),
        "searched_names": [item["name"] for item in sweep.space]})


def sweep_data(request, sweep_id: int):
    """The live part of the page: status, trials, best so far. Only read: the workers and the periodic chore
    advance the sweep (tasks.py)."""
    sweep = owned_sweep(request, sweep_id)
    return JsonResponse(pbt.page_data(sweep) if sweep.is_pbt else figures.page_data(sweep))


def sweep_figures(request, sweep_id: int):
    """Optuna's figures of the study and the trials' evaluation curves, as plotly JSON."""
    sweep = owned_sweep(request, sweep_id)
    return JsonResponse(pbt.figures_of(sweep) if sweep.is_pbt else figures.figures(sweep))


@require_POST
def sweep_cancel(request, sweep_id: int):
    return cancel_group(request, owned_sweep(request, sweep_id, edit=True), study.cancel, "sweep")


@require_POST
def sweep_delete(request, sweep_id: int):
    return delete_group(request, owned_sweep(request, sweep_id, edit=True), study.delete, "sweep", "trials",
                        "sweep-list")


@require_POST
def sweep_extend(request, sweep_id: int):
    sweep = owned_sweep(request, sweep_id, edit=True)
    form = ExtendForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(form.errors.get("more", ["Give a number of trials."])))
        return redirect(sweep)
    if sweep.is_pbt:
        messages.error(request, "A population trains together from the start: it cannot grow.")
        return redirect(sweep)
    if sweep.sampler == Sweep.Sampler.GRID:
        messages.error(request, "A grid sweep runs every combination once: there is nothing to add.")
        return redirect(sweep)
    study.extend(sweep, form.cleaned_data["more"])
    more = form.cleaned_data["more"]
    messages.success(request, f"{more} more trial{pluralize(more)}.")
    return redirect(sweep)


@require_POST
def sweep_launch_best(request, sweep_id: int):
    sweep = owned_sweep(request, sweep_id, edit=True)
    form = LaunchBestForm(request.POST, owner=request.user)
    if not form.is_valid():
        messages.error(request, " ".join(form.errors.get("seeds", ["Give a number of seeds."])))
        return redirect(sweep)
    experiment = (pbt.launch_best if sweep.is_pbt else study.launch_best)(sweep, form.cleaned_data["seeds"])
    if experiment is None:
        messages.error(request, "No trial has completed yet.")
        return redirect(sweep)
    messages.success(request, f"Launched the best trial's values with {experiment.num_seeds} "
                              f"seed{pluralize(experiment.num_seeds)}.")
    return redirect(experiment)
