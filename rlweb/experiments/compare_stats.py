"""The compare page's RL-grade statistics (Agarwal et al., 2021): runs grouped (by algorithm, experiment, tag or a
hyperparameter), each run's score on its task normalised (rlweb.scores.normalise), then per group the IQM, median,
mean and optimality gap with 95% stratified bootstrap intervals, the probability of improvement of one group over
another, performance profiles and sample-efficiency curves (rlweb.scores.aggregates, built on rliable).

Reading the scores from the database is quick and done on the request. The bootstrap is not: `statistics()`
answers from the cache when the same selection was computed before, and otherwise starts the computation off the
request path (a Celery task on the `jobs` queue when a live worker serves it, else a thread of the web process)
and answers "pending"; the page asks again until the result is there. The cache key is a hash of everything
that decides the result: the inputs (run ids, each run's last stored event, scores, options) and the draws.
The computation reads only that input, from Redis, never the database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import asdict, dataclass

import numpy as np
import redis
from django.conf import settings
from kombu.exceptions import OperationalError as QueueUnreachable

from rlweb.experiments import compare, history, workers
from rlweb.experiments.models import Run
from rlweb.experiments.redis_keys import redis_client
from rlweb.scores import baselines, normalise

logger = logging.getLogger(__name__)

TASK = "rlweb.compare_statistics"  # tasks.compare_statistics
REPS = 10_000  # bootstrap draws for the aggregates and the probability of improvement
CURVE_REPS = 2_000  # ... for performance profiles and sample-efficiency curves (rliable's default for profiles)
SEED = 0
CURVE_POINTS = 20
PROFILE_POINTS = 41
RESULT_SECONDS = 7 * 24 * 3600  # a computed result is kept this long (a new event in any run changes the key)
PENDING_SECONDS = 120  # a computation not finished by then is started again by the next request
EVAL_RETURN, EPISODE_RETURN = "eval/return_mean", "rollout/episode_return"
METRICS = {EVAL_RETURN: "evaluation return", EPISODE_RETURN: "training episode return"}
COUNTS = {"final": "final", "best": "best", "last": "mean of the last N"}
MAX_LAST = 1000
GROUPINGS = {"algorithm": "algorithm", "experiment": "experiment", "tag": "tag"}


@dataclass(frozen=True)
class StatsOptions:
    by: str = "algorithm"
    metric: str = EVAL_RETURN
    count: str = "final"
    last: int = 5
    improve: str = ""  # P(improve > over), the two groups compared ("": the first two)
    over: str = ""


def grouping_choices(runs: list[Run]) -> dict[str, str]:
    choices = dict(GROUPINGS)
    choices.update({key: label for key, label in compare.grouping_choices(runs).items() if key.startswith("hp:")})
    return choices


def default_metric(runs: list[Run]) -> str:
    """The evaluation return, unless none of the runs evaluates (logged runs: their scripts rarely do, and those that
    do name it as they like), then the training episodes' return. It follows the experiments' settings, not how far
    the runs have got."""
    if runs and not any(run.experiment.eval_episodes and not run.experiment.is_logged for run in runs):
        return EPISODE_RETURN
    return EVAL_RETURN


def parse_options(params, runs: list[Run]) -> StatsOptions:
    """The statistics' options from the query (`by`, `metric`, `count`, `last`, `improve`, `over`); SelectionError says
    what is wrong, by field."""
    by, count = params.get("by", "algorithm"), params.get("count", "final")
    metric = params.get("metric") or default_metric(runs)
    if by not in grouping_choices(runs):
        raise compare.SelectionError(f"by must be one of: {', '.join(grouping_choices(runs))}.")
    if metric not in METRICS:
        raise compare.SelectionError(f"metric must be one of: {', '.join(METRICS)}.")
    if count not in COUNTS:
        raise compare.SelectionError(f"count must be one of: {', '.join(COUNTS)}.")
    raw_last = params.get("last", "5").strip() or "5"
    if not raw_last.isascii() or not raw_last.isdigit() or not 1 <= int(raw_last[:6]) <= MAX_LAST:
        raise compare.SelectionError(f"last must be a whole number from 1 to {MAX_LAST}.")
    return StatsOptions(by=by, metric=metric, count=count, last=int(raw_last),
                        improve=params.get("improve", "")[:200], over=params.get("over", "")[:200])


def group_labels(run: Run, by: str) -> list[str]:
    """The groups a run belongs to: one, or one per tag of its experiment (none when it has no tag)."""
    if by == "tag":
        return [f"tag:{tag}" for tag in run.experiment.tags or []]
    return [compare.group_label(run, by)]


def run_score(run: Run, series: dict | None, options: StatsOptions) -> float | None:
    """The score that counts for a run: its final or best value of the metric, or the mean of its last N."""
    values = [value for value in (series or {}).get("value", []) if value is not None]
    evaluation = options.metric == EVAL_RETURN
    if options.count == "final":
        return run.eval_return_mean if evaluation and run.eval_return_mean is not None else (values[-1] if values else None)
    if options.count == "best":
        return run.best_eval_return if evaluation and run.best_eval_return is not None else (max(values) if values else None)
    return float(np.mean(values[-options.last:])) if values else None


# SB3's logger (and so its TensorBoard logs, followed or imported) has no value per episode, only the mean return
# of the last 100: a run with nothing else is scored by it, and the card says which runs were
EPISODE_MEAN_RETURN = "rollout/ep_rew_mean"


def score_series(series: dict[str, dict], metric: str) -> tuple[str, dict | None]:
    """A run's series of the metric and its key: for the training episode return, the first of its keys the run has
    (a logged script's `charts/episodic_return`), else SB3's mean of the last 100 episodes."""
    keys = (*history.EPISODE_RETURN_KEYS, EPISODE_MEAN_RETURN) if metric == EPISODE_RETURN else (metric,)
    key = next((key for key in keys if key in series), metric)
    return key, series.get(key)


def collect(runs: list[Run], options: StatsOptions) -> dict:
    """Everything the computation needs, read from the database: per group, per task, the runs' normalised scores
    and curves, and notes on what was left out and why. JSON, so it can be hashed and handed to a worker."""
    keyed = {run.pk: score_series(history.metric_series(run), options.metric) for run in runs}
    series = {pk: found for pk, (_, found) in keyed.items()}
    by_means = [pk for pk, (key, found) in keyed.items() if key == EPISODE_MEAN_RETURN and found]
    tasks = sorted({run.experiment.env_id for run in runs})
    references = {task: normalise.reference(task) for task in tasks}
    normalised = all(references.values())
    notes = []
    if not normalised:
        named = lambda task: task or "runs without an environment id"  # noqa: E731  (a TensorBoard folder's)
        missing = [named(task) for task in tasks if not references[task]]
        if len(tasks) == 1:
            notes.append(f"No reference scores for {named(tasks[0])}: the scores are raw returns, not normalised.")
        else:
            notes.append(f"No reference scores for {', '.join(missing)}: left out, so that the others can be "
                         "normalised and aggregated.")
            tasks = [task for task in tasks if references[task]]
            normalised = bool(tasks)

    def scale(task: str, value: float) -> float:
        return normalise.normalise(task, value) if normalised else value

    groups: dict[str, dict[str, list]] = {}
    without_score = []
    for run in runs:
        task = run.experiment.env_id
        if task not in tasks:
            continue
        score = run_score(run, series[run.pk], options)
        if score is None:
            without_score.append(run.pk)
            continue
        points = series[run.pk] or {"step": [], "value": []}
        curve = [(step, scale(task, value)) for step, value in zip(points["step"], points["value"]) if value is not None]
        for label in group_labels(run, options.by):
            groups.setdefault(label, {}).setdefault(task, []).append(
                {"run": run.pk, "seed": run.seed, "score": scale(task, score), "raw": score, "curve": curve})
    if without_score:
        notes.append(f"Runs with no {METRICS[options.metric]} yet: {', '.join(f'#{pk}' for pk in without_score)}.")
    if by_means:
        notes.append(f"Scored by {EPISODE_MEAN_RETURN} (the mean return of the last 100 episodes, all their logs "
                     f"have): {', '.join(f'#{pk}' for pk in by_means)}.")
    return {"options": asdict(options), "normalised": normalised, "tasks": tasks, "groups": groups, "notes": notes,
            "references": {task: references[task] for task in tasks},
            "last_events": {str(pk): seq for pk, seq in compare.stored_through([run.pk for run in runs]).items()},
            "reps": REPS, "curve_reps": CURVE_REPS, "seed": SEED}


def cache_key(inputs: dict) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return f"rlweb:compare-stats:{digest}"


def matrices(groups: dict) -> tuple[dict, dict, dict, list]:
    """Per group a runs x tasks matrix of scores (each task cut to the group's fewest runs on a task, so the matrix is
    whole), the same runs' curves, its tasks, and notes on the runs cut."""
    scores, members, tasks_of, notes = {}, {}, {}, []
    for label, by_task in groups.items():
        runs_per_task = min(len(entries) for entries in by_task.values())
        cut = sum(len(entries) - runs_per_task for entries in by_task.values())
        if cut:
            notes.append(f"{label}: {runs_per_task} run{'s' if runs_per_task > 1 else ''} per task counted (the fewest "
                         f"on one task); {cut} more left out of its aggregates.")
        tasks = sorted(by_task)
        chosen = {task: sorted(by_task[task], key=lambda entry: (entry["seed"], entry["run"]))[:runs_per_task]
                  for task in tasks}
        scores[label] = np.array([[chosen[task][i]["score"] for task in tasks] for i in range(runs_per_task)])
        members[label] = chosen
        tasks_of[label] = tasks
    return scores, members, tasks_of, notes


def curve_grid(members: dict) -> np.ndarray | None:
    """CURVE_POINTS env steps that every counted run's curve covers (from the latest first point to the earliest last)."""
    curves = [entry["curve"] for chosen in members.values() for entries in chosen.values() for entry in entries]
    if not curves or not all(curves):
        return None
    start, end = max(curve[0][0] for curve in curves), min(curve[-1][0] for curve in curves)
    return np.linspace(start, end, CURVE_POINTS) if end > start else None


def compute(inputs: dict) -> dict:
    """The statistics of collect()'s inputs: aggregates, probability of improvement, profiles and curves."""
    *_, result = compute_in_stages(inputs)
    return result


def compute_in_stages(inputs: dict):
    """compute(), yielding first the table (aggregates and probability of improvement, "partial"), then the whole."""
    from rlweb.scores import aggregates  # scipy and rliable: imported where the statistics are computed only

    scores, members, tasks_of, notes = matrices(inputs["groups"])
    result = {"groups": list(scores), "tasks": tasks_of, "runs": {label: len(matrix) for label, matrix in scores.items()},
              "normalised": inputs["normalised"], "notes": inputs["notes"] + notes,
              "references": inputs["references"], "options": inputs["options"], "reps": inputs["reps"],
              "curve_reps": inputs["curve_reps"], "aggregates": {}, "improvement": None, "profiles": {},
              "efficiency": None}
    if not scores:
        yield {**result, "state": "done"}
        return
    result["aggregates"] = aggregates.aggregate_scores(scores, reps=inputs["reps"], seed=inputs["seed"])
    result["improvement"] = improvement(scores, tasks_of, inputs)
    yield {**result, "state": "partial"}
    every = np.concatenate([matrix.ravel() for matrix in scores.values()])
    low, high = min(0.0, float(every.min())), float(every.max())
    taus = np.linspace(low, high if high > low else low + 1, PROFILE_POINTS)
    result["profiles"] = aggregates.performance_profiles(scores, taus, reps=inputs["curve_reps"], seed=inputs["seed"])
    grid = curve_grid(members)
    if grid is not None:
        curves = {label: np.array([[np.interp(grid, *zip(*chosen[task][i]["curve"])) for task in tasks_of[label]]
                                   for i in range(len(scores[label]))]) for label, chosen in members.items()}
        result["efficiency"] = {"steps": grid.tolist(), "groups": aggregates.sample_efficiency(
            curves, reps=inputs["curve_reps"], seed=inputs["seed"])}
    yield {**result, "state": "done"}


def improvement(scores: dict, tasks_of: dict, inputs: dict) -> dict | None:
    """P(X > Y) for the two groups asked for (else the first two), on the tasks both ran."""
    from rlweb.scores import aggregates

    labels = list(scores)
    x, y = inputs["options"]["improve"], inputs["options"]["over"]
    x = x if x in scores else labels[0]
    y = y if y in scores and y != x else next((label for label in labels if label != x), None)
    if y is None:
        return None
    shared = [task for task in tasks_of[x] if task in tasks_of[y]]
    if not shared:
        return {"x": x, "y": y, "tasks": [], "value": None}
    columns = lambda label: [tasks_of[label].index(task) for task in shared]  # noqa: E731
    point, low, high = aggregates.probability_of_improvement(
        scores[x][:, columns(x)], scores[y][:, columns(y)], reps=inputs["reps"], seed=inputs["seed"])
    return {"x": x, "y": y, "tasks": shared, "value": [point, low, high]}


# --- off the request path, cached ----------------------------------------------------------------------

def compute_and_store(key: str) -> str:
    """The worker's (or thread's) side: compute the input stored under key and store the result, the table first
    (state "partial", while the curves are computed), then the whole. Returns the last state."""
    client = redis_client()
    raw = client.get(f"{key}:input")
    if raw is None:
        return "gone"
    try:
        for result in compute_in_stages(json.loads(raw)):
            client.set(key, json.dumps(result), ex=RESULT_SECONDS if result["state"] == "done" else PENDING_SECONDS)
    except Exception as error:  # noqa: BLE001  (said on the page rather than left pending)
        logger.exception("compare statistics %s failed", key)
        result = {"state": "failed", "error": f"The statistics could not be computed: {error}"}
        client.set(key, json.dumps(result), ex=PENDING_SECONDS)
    client.delete(f"{key}:pending", f"{key}:input")
    return result["state"]


def start(key: str, inputs: dict) -> None:
    """Store the input and start its computation once (a Celery task on the jobs queue where a worker serves it)."""
    client = redis_client()
    client.set(f"{key}:input", json.dumps(inputs), ex=PENDING_SECONDS)  # read once, when the computation starts
    if not client.set(f"{key}:pending", "1", nx=True, ex=PENDING_SECONDS):
        return  # already under way
    if workers.jobs_worker_expected():
        try:
            from rlweb.celery import app

            app.send_task(TASK, args=[key], queue=settings.JOBS_QUEUE)
            return
        except (redis.RedisError, QueueUnreachable, OSError) as error:
            logger.warning("compare statistics: cannot reach the task queue (%s); computing here", error)
    threading.Thread(target=compute_and_store, args=[key], daemon=True, name="compare-statistics").start()


def statistics(runs: list[Run], options: StatsOptions) -> dict:
    """The cached result for this selection ("done"), the table of one still being computed ("partial"), or
    {"state": "pending"} after starting its computation. A failed one is kept a short while, then tried again."""
    inputs = collect(runs, options)
    if not inputs["groups"]:  # nothing to draw: nothing to compute either
        return compute(inputs)
    key = cache_key(inputs)
    client = redis_client()
    cached = client.get(key)
    if cached is not None:
        result = json.loads(cached)
        if result["state"] != "partial" or client.exists(f"{key}:pending"):
            return {**result, "cached": result["state"] == "done"}
    start(key, inputs)  # not computed, or its computation stopped half-way
    return {"state": "pending", "groups": sorted(inputs["groups"])}


def baseline_bands(runs: list[Run]) -> list[dict]:
    """Published final scores for the runs' task and algorithms, when they share one task: bands for the charts."""
    tasks = {run.experiment.env_id for run in runs}
    if len(tasks) != 1:
        return []
    task = tasks.pop()
    algorithms = sorted({run.experiment.algorithm for run in runs})
    bands = []
    for algorithm in algorithms:
        standing = baselines.standing(task, algorithm, None)
        if standing:
            frames = " (4 frames each)" if normalise.atari_game(task) else ""
            bands.append({**standing, "x_note": f"published final score after {standing['steps']:,} agent steps{frames}"})
    return bands


def baseline_curves(runs: list[Run]) -> list[dict]:
    """Published learning curves for the runs' task and algorithms, when they share one task, cut at their budget."""
    tasks = {run.experiment.env_id for run in runs}
    if len(tasks) != 1:
        return []
    task, longest = tasks.pop(), max(run.total_steps for run in runs)
    return [curve for algorithm in sorted({run.experiment.algorithm for run in runs})
            for curve in baselines.curves(task, algorithm, up_to=longest)]
