"""Comparing runs: which runs a user may compare, the metrics they share, seed groups aggregated on a common
grid, the hyperparameter diff, the summary table and the export rows. Plain functions over models and numpy
arrays; compare_views.py serves them.

Curves come from the run page's downsampled summary (`history.metric_series`: a bounded number of points
per metric, extremes kept), so a comparison of long runs reads a few thousand points per run, not every
event. Exports read the stored events in full.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
from django.db.models import Max
from trainer.events import METRIC_KINDS

from rlweb.experiments import history
from rlweb.experiments.live_changes import applied_changes, changed_text
from rlweb.experiments.models import Event, MetricBucket, Run
from rlweb.projects import access

MAX_RUNS = 50
GRID_POINTS = 200  # points of the common grid a group's curves are interpolated onto
MAX_POINTS = 400  # about the most points of one run's metric sent to draw (20 runs in a chart of ~600 px)
BOOTSTRAP_SAMPLES = 1_000
BANDS = {"std": "± standard deviation", "minmax": "min to max", "ci95": "95% bootstrap CI of the mean"}
X_AXES = ("step", "time")
FIXED_GROUPINGS = {"run": "each run", "experiment": "experiment", "algorithm": "algorithm", "env": "environment"}
LOGGED_ALGORITHM_KEYS = ("algorithm", "algo", "exp_name")  # where a script's config names its algorithm
FIRST_METRICS = ("rollout/episode_return", "eval/return_mean", "rollout/episode_length", "train/loss")
SEPARATORS = str.maketrans({" ": ",", "+": ","})  # `3 7 9` and `3+7+9` read as `3,7,9`


class SelectionError(ValueError):
    """A comparison asked for that cannot be served; the message says why, for the user."""


@dataclass(frozen=True)
class Options:
    group: str = "run"
    band: str = "std"
    x: str = "step"
    threshold: float | None = None


# --- what is compared ---------------------------------------------------------------------------------

def parse_run_ids(values: list[str]) -> list[int]:
    """Run ids from `runs=3,7,9` (or `runs=3&runs=7`), in order, each once; at most MAX_RUNS."""
    pieces = [piece.strip() for value in values for piece in value.translate(SEPARATORS).split(",")]
    ids = []
    for piece in filter(None, pieces):
        if not piece.isascii() or not piece.isdigit() or len(piece) > 18:
            raise SelectionError(f"runs must be run numbers separated by commas; {piece[:20]!r} is not one.")
        if int(piece) not in ids:
            ids.append(int(piece))
        if len(ids) > MAX_RUNS:  # stop at once: a long list is not worth reading further
            raise SelectionError(f"A comparison holds at most {MAX_RUNS} runs; more were asked for.")
    return ids


def stored_through(run_ids: list[int]) -> dict[int, int]:
    """{run id: the last seq the database holds for it} (runs without events left out)."""
    return dict(Event.objects.filter(run_id__in=run_ids).values("run_id").annotate(last=Max("seq"))
                .values_list("run_id", "last"))


def parse_positions(value: str, run_ids: list[int]) -> dict[int, int]:
    """`after=3:120,7:98`, the seqs a page drew each run through, for the selected runs only; anything else in it
    is left out (the stream then starts from what the database holds, as without it)."""
    positions = {}
    for piece in value.split(",")[:MAX_RUNS]:
        run, _, seq = piece.partition(":")
        if run.isascii() and run.isdigit() and seq.isascii() and seq.isdigit() and len(run) <= 18 and len(seq) <= 18:
            if int(run) in run_ids:
                positions[int(run)] = int(seq)
    return positions


def parse_ids(values: list[str]) -> list[int]:
    """The values that are record numbers (`?experiment=2&experiment=5`); others, and numbers too large for a
    database key (more than 18 digits), are left out."""
    return [int(value) for value in values if value.isascii() and value.isdigit() and len(value) <= 18]


def runs_visible_to(user):
    """The runs `user` may compare: those of the experiments they see (their own and their projects')."""
    return Run.objects.filter(access.visible(user, "experiment__")).select_related("experiment", "logged")


def select_runs(user, run_ids: list[int]) -> tuple[list[Run], int]:
    """The runs asked for that `user` may see, in the order asked, and how many were left out (runs of other
    users and ids that do not exist count alike, so nothing is told about them)."""
    found = runs_visible_to(user).in_bulk(run_ids)
    runs = [found[run_id] for run_id in run_ids if run_id in found]
    return runs, len(run_ids) - len(runs)


def parse_options(params, runs: list[Run]) -> Options:
    group, band, x = params.get("group", "run"), params.get("band", "std"), params.get("x", "step")
    if group not in grouping_choices(runs):
        raise SelectionError(f"group must be one of: {', '.join(grouping_choices(runs))}.")
    if band not in BANDS:
        raise SelectionError(f"band must be one of: {', '.join(BANDS)}.")
    if x not in X_AXES:
        raise SelectionError(f"x must be one of: {', '.join(X_AXES)}.")
    return Options(group=group, band=band, x=x, threshold=parse_threshold(params.get("threshold", "")))


def parse_threshold(raw: str) -> float | None:
    if not raw.strip():
        return None
    try:
        threshold = float(raw)
    except ValueError:
        raise SelectionError(f"threshold must be a number, not {raw[:20]!r}.") from None
    if not math.isfinite(threshold):
        raise SelectionError("threshold must be a finite number.")
    return threshold


def run_label(run: Run) -> str:
    return f"#{run.pk} {run.experiment.name} · seed {run.seed}"


def run_info(run: Run) -> dict:
    experiment = run.experiment
    return {"id": run.pk, "label": run_label(run), "url": run.get_absolute_url(), "experiment": experiment.name,
            "experiment_id": experiment.pk, "algorithm": algorithm_of(run), "env_id": experiment.env_id,
            "seed": run.seed, "status": run.status, "active": run.is_active,
            "steps_done": run.steps_done, "total_steps": run.total_steps}


# --- hyperparameters -----------------------------------------------------------------------------------

def settings_of(run: Run) -> dict:
    """Everything that sets a run up: algorithm, environment, seed, budget, the preset its hyperparameters
    started from, and the hyperparameters; for a run logged from a script, what its own script's config said."""
    experiment = run.experiment
    if experiment.is_logged:  # its experiment holds its first run's config; the trainer's settings are not its
        return {**logged_config(run), "algorithm": algorithm_of(run), "env_id": experiment.env_id, "seed": run.seed,
                "total_steps": run.total_steps}
    return {"algorithm": experiment.algorithm, "env_id": experiment.env_id, "preset": experiment.preset or "none",
            "seed": run.seed,
            "total_steps": experiment.total_steps, "eval_interval": experiment.eval_interval,
            "eval_episodes": experiment.eval_episodes, "device": experiment.device, **experiment.hyperparameters}


def logged_config(run: Run) -> dict:
    return run.logged.config if hasattr(run, "logged") else {}


def algorithm_of(run: Run) -> str:
    """The run's algorithm; for a run logged from a script, what its config calls it (SB3's callback records the
    model's class, CleanRL's scripts their `exp_name`), else "logged": scripts of several algorithms group apart."""
    if not run.experiment.is_logged:
        return run.experiment.algorithm
    config = logged_config(run)
    named = next((config[key] for key in LOGGED_ALGORITHM_KEYS if isinstance(config.get(key), str)
                  and config[key].strip()), None)
    return named.strip()[:100] if named else run.experiment.algorithm


def hyperparameter_rows(runs: list[Run]) -> list[dict]:
    """One row per setting, a value per run (None where a run's algorithm has no such setting), and whether
    the runs differ in it. A setting changed while the run trained reads "0.001 → 0.0005 changed at step 3,000"."""
    settings = [settings_of(run) for run in runs]
    changes = [applied_changes(run) for run in runs]
    for setting, changed in zip(settings, changes):  # a setting stored without its default: from before the change
        setting.update({name: steps[0][1] for name, steps in changed.items() if name not in setting})
    return diff_rows([{**setting, **{name: changed_text(setting.get(name), steps) for name, steps in changed.items()}}
                      for setting, changed in zip(settings, changes)])


def diff_rows(values_by_run: list[dict]) -> list[dict]:
    """One row per name in any of the dicts (a run's settings, or its environment), in the order first seen: its value
    per run (None where a run lacks it) and whether the runs differ in it."""
    rows = []
    for name in dict.fromkeys(name for values in values_by_run for name in values):
        row = [values.get(name) for values in values_by_run]
        rows.append({"name": name, "values": row, "differs": any(value != row[0] for value in row)})
    return rows


def grouping_choices(runs: list[Run]) -> dict[str, str]:
    """`group=` values: the fixed groupings, then `hp:<name>` for every setting of the runs."""
    choices = dict(FIXED_GROUPINGS)
    for row in hyperparameter_rows(runs):
        if row["name"] not in ("algorithm", "env_id"):
            choices[f"hp:{row['name']}"] = row["name"]
    return choices


def group_label(run: Run, group: str) -> str:
    if group == "run":
        return run_label(run)
    if group == "experiment":
        return f"{run.experiment.name} #{run.experiment.pk}"
    if group == "algorithm":
        return algorithm_of(run)
    if group == "env":
        return run.experiment.env_id
    name = group.removeprefix("hp:")
    return f"{name}={settings_of(run).get(name, '–')}"


def groups_of(runs: list[Run], group: str) -> dict[str, list[Run]]:
    """Runs by group label, groups in the order their first run was selected."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(group_label(run, group), []).append(run)
    return groups


# --- aggregation over seeds ----------------------------------------------------------------------------

def common_grid(curves: list[tuple[np.ndarray, np.ndarray]], points: int = GRID_POINTS) -> np.ndarray:
    """Evenly spaced x values from the earliest first point to the latest last point of the curves."""
    start = min(float(x[0]) for x, _ in curves)
    end = max(float(x[-1]) for x, _ in curves)
    return np.array([start]) if start == end else np.linspace(start, end, points)


def on_grid(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """`y` interpolated linearly at `grid`; NaN outside the curve's own x range (no extrapolation)."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    values = np.interp(grid, x, y)
    values[(grid < x[0]) | (grid > x[-1])] = np.nan
    return values


def aggregate(curves: list[tuple[list, list]], band: str = "std", grid: np.ndarray | None = None) -> dict:
    """The mean of several runs' curves and a band around it, on a common grid.

    Each curve (x, y) is interpolated onto the grid within its own x range; at each grid point the mean and
    band are taken over the curves that reach it (`count`). Curves without points are left out; `seeds` is
    the number of curves used. Bands: `std`, the sample standard deviation (0 for one curve); `minmax`;
    `ci95`, the 2.5 and 97.5 percentiles of the mean of curves resampled with replacement."""
    curves = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in curves if len(x)]
    if not curves:
        return {"x": [], "mean": [], "lower": [], "upper": [], "count": [], "seeds": 0}
    grid = common_grid(curves) if grid is None else np.asarray(grid, dtype=float)
    table = np.vstack([on_grid(x, y, grid) for x, y in curves])  # curves × grid points, NaN where not reached
    present = ~np.isnan(table)
    count = present.sum(axis=0)
    keep = count > 0
    table, present, count, grid = table[:, keep], present[:, keep], count[keep], grid[keep]
    mean = np.where(present, table, 0.0).sum(axis=0) / count
    lower, upper = band_of(band, table, present, mean, count)
    return {"x": grid.tolist(), "mean": mean.tolist(), "lower": lower.tolist(), "upper": upper.tolist(),
            "count": count.tolist(), "seeds": len(curves)}


def band_of(band: str, table, present, mean, count) -> tuple[np.ndarray, np.ndarray]:
    if band == "std":
        squares = np.where(present, (table - mean) ** 2, 0.0).sum(axis=0)
        spread = np.sqrt(squares / np.maximum(count - 1, 1))
        return mean - spread, mean + spread
    if band == "minmax":
        return np.where(present, table, np.inf).min(axis=0), np.where(present, table, -np.inf).max(axis=0)
    if band == "ci95":
        return bootstrap_interval(table, present)
    raise ValueError(f"unknown band {band!r}")


def bootstrap_interval(table, present, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0):
    """The 2.5 and 97.5 percentiles of the mean over curves drawn with replacement (the same draws at every
    grid point; a draw's mean at a point uses the drawn curves that reach it). Seeded: the same band each time."""
    random = np.random.default_rng(seed)
    curves = table.shape[0]
    values = np.where(present, table, 0.0)
    means = []
    for start in range(0, samples, 100):  # 100 draws at a time keeps memory small for 50 curves
        draws = random.integers(0, curves, size=(min(100, samples - start), curves))
        reached = present[draws].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means.append(values[draws].sum(axis=1) / reached)
    return percentiles(np.vstack(means), 2.5), percentiles(np.vstack(means), 97.5)


def percentiles(samples: np.ndarray, percent: float) -> np.ndarray:
    """`np.nanpercentile(samples, percent, axis=0)` (linear interpolation between the values that are not
    NaN), written out: many times faster, and with at least one value in each column, as here."""
    ordered = np.sort(samples, axis=0)  # NaN sorts last
    position = percent / 100 * ((~np.isnan(ordered)).sum(axis=0) - 1)
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, ordered.shape[0] - 1)
    low = np.take_along_axis(ordered, below[None], axis=0)[0]
    high = np.take_along_axis(ordered, above[None], axis=0)[0]
    return low + (position - below) * np.where(position > below, high - low, 0.0)


# --- curves and summaries of runs ----------------------------------------------------------------------

def shared_metrics(series_by_run: dict[int, dict]) -> list[str]:
    """The metric keys that every run reporting the key's namespace (`eval/`, `train/`, ...) has, the usual
    ones first: a run that has not evaluated yet does not hide the others' evaluations, but `train/epsilon`,
    which DQN runs report and PPO runs (with their own `train/` keys) do not, is left out."""
    keyed = [set(series) for series in series_by_run.values() if series]
    shared = set()
    for key in set().union(*keyed):
        namespace = key.partition("/")[0]
        reporting = [keys for keys in keyed if any(other.partition("/")[0] == namespace for other in keys)]
        if all(key in keys for keys in reporting):
            shared.add(key)
    return [key for key in FIRST_METRICS if key in shared] + sorted(shared - set(FIRST_METRICS))


def curve(series: dict | None, x: str) -> tuple[list, list]:
    if not series:
        return [], []
    return series[x], series["value"]


def for_drawing(series: dict | None, x: str, max_points: int = MAX_POINTS) -> dict | None:
    """A run's metric along `x` as `{"x": [...], "value": [...]}`. A longer one keeps the smallest and the
    largest value of each window of consecutive points, so peaks and dips survive, as in history's buckets,
    and its first and last point, so a live curve reaches its latest step."""
    if not series:
        return None
    xs, values = curve(series, x)
    if len(values) <= max_points:
        return {"x": xs, "value": values}
    window = math.ceil(len(values) / (max_points // 2))
    kept = {0, len(values) - 1}
    for start in range(0, len(values), window):
        indexes = range(start, min(start + window, len(values)))
        kept |= {min(indexes, key=values.__getitem__), max(indexes, key=values.__getitem__)}
    kept = sorted(kept)
    return {"x": [xs[index] for index in kept], "value": [values[index] for index in kept]}


def grouped_metric(runs: list[Run], series_by_run: dict[int, dict], key: str, options: Options) -> list[dict]:
    groups = []
    for label, members in groups_of(runs, options.group).items():
        curves = [curve(series_by_run[run.pk].get(key), options.x) for run in members]
        groups.append({"label": label, "runs": [run.pk for run in members], **aggregate(curves, options.band)})
    return groups


def steps_to_reach(run: Run, threshold: float) -> int | None:
    """The env step of the run's first evaluation whose mean return is at least `threshold`. The summary's
    buckets (history.py) keep each one's largest value: the first bucket that reaches the threshold holds
    the answer, so only its events are searched, not every evaluation of a long run."""
    buckets = MetricBucket.objects.filter(run=run, key="eval/return_mean").order_by("index")
    after = 0
    for last_seq, points in buckets.values_list("last_seq", "points"):
        if max(point[3] for point in points) >= threshold:
            first = Event.objects.filter(run=run, kind="eval", seq__gt=after, seq__lte=last_seq,
                                         **{"values__eval/return_mean__gte": threshold}).order_by("seq")
            return first.values_list("step", flat=True).first()
        after = last_seq
    return None


def summary_row(run: Run, evaluations: dict | None, threshold: float | None) -> dict:
    """Final and best eval return (from the run row once it ended, else from its drawn evaluations), env steps
    to reach `threshold`, wall seconds of the whole run (every attempt), env steps per second of the current
    attempt, and the device."""
    values = evaluations["value"] if evaluations else []
    final = run.eval_return_mean if run.eval_return_mean is not None else (values[-1] if values else None)
    best = run.best_eval_return if run.best_eval_return is not None else (max(values) if values else None)
    steps, seconds = run.steps_done - run.start_step, run.attempt_seconds
    return {"run": run.pk, "label": run_label(run), "status": run.status, "final_eval_return": final,
            "best_eval_return": best, "steps_to_threshold": steps_to_reach(run, threshold) if threshold is not None
            else None, "wall_seconds": run.training_seconds,
            "steps_per_second": steps / seconds if seconds and steps > 0 else None,
            "device": run.device_used or run.experiment.device, "steps_done": run.steps_done}


def comparison(runs: list[Run], options: Options) -> dict:
    """Everything the compare page draws: runs, each shared metric's curve per run along the x axis (or, when
    runs are grouped, each group's mean and band), the summary table and the videos. Groups are aggregated
    from the run page's summary (up to about a thousand points per metric), not from the thinner curves."""
    drawn_through = stored_through([run.pk for run in runs])  # read first: a point stored meanwhile is news
    series_by_run = {run.pk: history.metric_series(run) for run in runs}
    metrics = []
    for key in shared_metrics(series_by_run):
        if options.group == "run":
            metric = {"key": key, "runs": {run.pk: for_drawing(series_by_run[run.pk].get(key), options.x)
                                           for run in runs}}
        else:
            metric = {"key": key, "groups": grouped_metric(runs, series_by_run, key, options)}
        metrics.append(metric)
    return {"runs": [{**run_info(run), "drawn_through": drawn_through.get(run.pk, 0)} for run in runs],
            "options": options.__dict__, "metrics": metrics,
            "without_points": [run.pk for run in runs if not series_by_run[run.pk]],
            "summary": [summary_row(run, series_by_run[run.pk].get("eval/return_mean"), options.threshold)
                        for run in runs],
            "videos": {run.pk: history.video_list(run) for run in runs}}


# --- export --------------------------------------------------------------------------------------------

EXPORT_COLUMNS = ["run", "experiment", "algorithm", "env_id", "seed", "seq", "kind", "step", "time", "key", "value"]


def export_rows(runs: list[Run]):
    """Every stored metric value of the runs, one row each (long format), run by run in seq order, keys sorted
    within an event (PostgreSQL's jsonb keeps no key order)."""
    for run in runs:
        through = history.last_stored_seq(run)
        experiment = run.experiment
        head = [run.pk, experiment.name, algorithm_of(run), experiment.env_id, run.seed]
        events = Event.objects.filter(run=run, kind__in=METRIC_KINDS, seq__lte=through).order_by("seq")
        for seq, kind, step, time, values in events.values_list("seq", "kind", "step", "time", "values").iterator(
                chunk_size=5_000):
            for key, value in sorted(values.items()):
                if history.is_number(value):
                    yield [*head, seq, kind, step, time, key, value]


def export_json(runs: list[Run], left_out: int, threshold: float | None):
    """`{"runs", "left_out", "settings", "summary", "columns", "rows"}` as JSON text, in pieces: `rows` are
    export_rows, which may be millions."""
    head = {"runs": [run_info(run) for run in runs], "left_out": left_out,
            "settings": {run.pk: settings_of(run) for run in runs},
            "summary": [summary_row(run, history.metric_series(run).get("eval/return_mean"), threshold) for run in runs],
            "columns": EXPORT_COLUMNS}
    yield json.dumps(head)[:-1] + ', "rows": ['
    batch, separator = [], ""
    for row in export_rows(runs):
        batch.append(json.dumps(row))
        if len(batch) == 1_000:
            yield separator + ",".join(batch)
            batch, separator = [], ","
    yield (separator + ",".join(batch) if batch else "") + "]}"
