"""What the sweep pages draw: the live data (trials, best so far) and the figures, as plotly JSON.

Optuna's own figures (optimisation history, parameter importances, slices) come from `optuna.visualization`;
the parallel coordinates are drawn here as lines on a cartesian chart, because Optuna's use plotly's `parcoords`
trace, which needs WebGL and is not in the cartesian bundle the site serves. The evaluation curves are each
trial's first seed, coloured by the trial's value; a pruned trial's curve ends where it stopped.
"""

from __future__ import annotations

import json
import math

from django.db.models import Count
from rlweb.experiments.compare import MAX_RUNS
from rlweb.experiments.compare_views import compare_url
from rlweb.experiments.models import Event, Run
from rlweb.sweeps import study
from rlweb.sweeps.models import Sweep, Trial

COLORSCALE = "Viridis"
UNRANKED = {"pruned": "rgba(176, 58, 46, 0.55)", "failed": "rgba(120, 120, 120, 0.5)",
            "running": "rgba(44, 87, 176, 0.8)"}


def summary(sweep: Sweep) -> dict:
    """A row of the sweep list."""
    counts = dict(sweep.trial_set.values_list("state").annotate(count=Count("pk")))
    best = study.best_trial(sweep)
    return {"sweep": sweep, "counts": counts, "done": sum(counts.get(state, 0) for state in ("complete", "pruned",
                                                                                                 "failed")),
            "best": best}


def trial_row(trial: Trial) -> dict:
    runs = list(trial.experiment.runs.all()) if trial.experiment else []
    return {"number": trial.number, "state": trial.state, "params": trial.params, "value": trial.value,
            "steps": trial.steps if trial.is_finished else sum(run.steps_done for run in runs),
            "pruned_at": trial.pruned_at, "reason": trial.reason,
            "experiment_url": trial.experiment.get_absolute_url() if trial.experiment else None,
            "runs": [{"id": run.pk, "url": run.get_absolute_url(), "status": run.status, "seed": run.seed,
                      "steps_done": run.steps_done, "total_steps": run.total_steps} for run in runs]}


def page_data(sweep: Sweep) -> dict:
    trials = [trial_row(trial) for trial in
              sweep.trial_set.select_related("experiment").prefetch_related("experiment__runs").order_by("number")]
    best = study.best_trial(sweep)
    evaluations = Event.objects.filter(run__experiment__sweep_trial__sweep=sweep, kind="eval").count()
    finished = sum(row["state"] != "running" for row in trials)
    ranked = sorted(trials, key=lambda row: (row["value"] is None, -(row["value"] or 0) if sweep.direction == "maximize"
                                             else row["value"] or 0))  # the best trials' runs first
    run_ids = [run["id"] for row in ranked for run in row["runs"]][:MAX_RUNS]
    statuses = [{run["status"] for run in row["runs"]} for row in trials if row["state"] == "running"]
    training = sum(Run.Status.RUNNING in these for these in statuses)
    queued = sum(Run.Status.QUEUED in these and Run.Status.RUNNING not in these for these in statuses)  # no worker yet
    return {"status": sweep.status, "trials_total": sweep.trials, "trials": trials, "finished": finished,
            "training": training, "queued": queued,
            "steps": sum(row["steps"] for row in trials),
            "best": best and {"number": best.number, "value": best.value, "params": best.params,
                              "experiment_url": best.experiment.get_absolute_url() if best.experiment else None},
            "compare_url": compare_url(run_ids, {}) if run_ids else None,
            "version": f"{finished}-{evaluations}"}


def space_rows(sweep: Sweep) -> list[tuple[str, str]]:
    """(name, what is searched) for the page's settings table."""
    rows = []
    for item in sweep.space:
        if item.get("choices"):
            rows.append((item["name"], "one of " + ", ".join(map(str, item["choices"]))))
        else:
            rows.append((item["name"], f"{item['low']} to {item['high']}{', log scale' if item.get('log') else ''}"))
    return rows + [(name, f"fixed at {value}") for name, value in sorted(sweep.fixed.items())]


def figures(sweep: Sweep) -> dict:
    """{"history", "importances", "slices", "parallel", "curves"}: plotly figures (data and layout), or a
    {"message"} saying why one cannot be drawn yet."""
    import optuna.visualization as visualization

    result = {"curves": curves(sweep), "parallel": parallel_coordinates(sweep)}
    if not sweep.trial_set.filter(state=Trial.State.COMPLETE).exists():  # the study is not read before
        waiting = {"message": "Drawn once a trial has completed."}
        return {**result, "history": waiting, "importances": waiting, "slices": waiting}
    optuna_study = study.load_study(sweep)
    complete = [trial for trial in optuna_study.trials if trial.state.name == "COMPLETE"]
    result["history"] = plotly_json(visualization.plot_optimization_history(optuna_study))
    result["slices"] = plotly_json(visualization.plot_slice(optuna_study))
    varied = {name for trial in complete for name in trial.params} if len(complete) >= 2 else set()
    try:
        result["importances"] = plotly_json(visualization.plot_param_importances(optuna_study)) if varied else \
            {"message": "Drawn once two trials have completed."}
    except (RuntimeError, ValueError) as error:  # e.g. every completed trial has the same values
        result["importances"] = {"message": f"Cannot be computed yet: {error}"}
    return result


def plotly_json(figure) -> dict:
    figure.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 40, "b": 50}, height=360)
    return json.loads(figure.to_json())


def colour_of(value: float | None, low: float, high: float, reverse: bool) -> str | None:
    from plotly.colors import sample_colorscale

    if value is None:
        return None
    position = 0.5 if high <= low else (value - low) / (high - low)
    return sample_colorscale(COLORSCALE, [1 - position if reverse else position])[0]


def value_range(sweep: Sweep) -> tuple[float, float]:
    values = [value for value in sweep.trial_set.filter(value__isnull=False).values_list("value", flat=True)]
    return (min(values), max(values)) if values else (0.0, 1.0)


def curves(sweep: Sweep) -> dict:
    low, high = value_range(sweep)
    traces = []
    trials = sweep.trial_set.select_related("experiment").order_by("number")
    first_runs = {run.experiment_id: run for run in Run.objects.filter(
        experiment__sweep_trial__sweep=sweep).order_by("experiment_id", "-seed")}  # the lowest seed wins
    points: dict[int, list] = {}
    for run_id, step, values in Event.objects.filter(
            run__in=[run.pk for run in first_runs.values()], kind="eval").order_by("run_id", "seq").values_list(
            "run_id", "step", "values"):
        if isinstance(values.get("eval/return_mean"), (int, float)):
            points.setdefault(run_id, []).append((step, values["eval/return_mean"]))
    for trial in trials:
        run = first_runs.get(trial.experiment_id)
        if run is None or run.pk not in points:
            continue
        steps, returns = zip(*points[run.pk])
        colour = colour_of(trial.value, low, high, sweep.direction == "minimize") or UNRANKED[trial.state]
        value = f"value {trial.value:.4g}" if trial.value is not None else trial.state
        traces.append({"type": "scatter", "mode": "lines+markers", "x": steps, "y": returns,
                       "name": f"trial {trial.number} ({value})", "customdata": [run.pk] * len(steps),
                       "line": {"color": colour, "width": 2 if trial.value is not None else 1.2,
                                "dash": "dot" if trial.state == "pruned" else "solid"},
                       "marker": {"size": 4, "color": colour}})
    if not traces:
        return {"message": "Drawn once a trial has evaluated."}
    return {"data": traces, "layout": {"template": "plotly_white", "height": 380, "showlegend": len(traces) <= 30,
                                       "xaxis": {"title": {"text": "env steps"}},
                                       "yaxis": {"title": {"text": "evaluation return"}},
                                       "margin": {"l": 60, "r": 20, "t": 20, "b": 50}}}


def axis_position(item: dict, value) -> float | None:
    """Where a parameter's value sits on its axis, from 0 (its low end or first choice) to 1."""
    if item.get("choices"):
        choices = [str(choice) for choice in item["choices"]]
        return choices.index(str(value)) / max(1, len(choices) - 1) if str(value) in choices else None
    low, high, value = float(item["low"]), float(item["high"]), float(value)
    if item.get("log"):
        low, high, value = math.log10(low), math.log10(high), math.log10(value)
    return (value - low) / (high - low) if high > low else 0.5


def axis_ends(item: dict) -> tuple[str, str]:
    if item.get("choices"):
        return str(item["choices"][0]), str(item["choices"][-1])
    return f"{item['low']:g}", f"{item['high']:g}"


def parallel_coordinates(sweep: Sweep) -> dict:
    """One line per completed trial across an axis per searched parameter and one for the value."""
    done = list(sweep.trial_set.filter(state=Trial.State.COMPLETE, value__isnull=False).order_by("number"))
    if not done:
        return {"message": "Drawn once a trial has completed."}
    low, high = value_range(sweep)
    names = [item["name"] for item in sweep.space] + ["value"]
    traces = []
    for trial in sorted(done, key=lambda trial: trial.value, reverse=sweep.direction == "minimize"):  # best on top
        positions = [axis_position(item, trial.params.get(item["name"])) for item in sweep.space]
        positions.append((trial.value - low) / (high - low) if high > low else 0.5)
        colour = colour_of(trial.value, low, high, sweep.direction == "minimize")
        traces.append({"type": "scatter", "mode": "lines+markers", "x": names, "y": positions,
                       "name": f"trial {trial.number}", "line": {"color": colour, "width": 2},
                       "marker": {"size": 6, "color": colour}, "showlegend": False,
                       "hovertext": [f"{name} = {trial.params.get(name, trial.value)}" for name in names],
                       "hoverinfo": "text+name"})
    ends = [axis_ends(item) for item in sweep.space] + [(f"{low:.4g}", f"{high:.4g}")]
    annotations = [{"x": name, "y": y, "text": text, "showarrow": False, "yshift": shift, "font": {"size": 11}}
                   for name, (bottom, top) in zip(names, ends)
                   for y, text, shift in ((0, bottom, -14), (1, top, 14))]
    return {"data": traces, "layout": {
        "template": "plotly_white", "height": 360, "annotations": annotations,
        "xaxis": {"type": "category", "showgrid": True, "gridcolor": "#999", "gridwidth": 1},
        "yaxis": {"visible": False, "range": [-0.15, 1.15]}, "margin": {"l": 30, "r": 30, "t": 30, "b": 40}}}

