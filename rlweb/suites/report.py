"""What a suite's page, its downloads and its report show: every run with its state and latest score, the score
table per environment and algorithm, and the aggregates across tasks per algorithm (IQM, median, mean and
optimality gap of normalised scores, with 95% stratified bootstrap intervals: rlweb.scores.aggregates).

A run's score is its final evaluation's mean return (`final`) or its best evaluation's (`best`), once it has
succeeded. A task (environment) counts in the aggregates when every algorithm has a score for each of its seeds
there and the environment has reference scores to normalise against (rlweb.scores.normalise); the others are
named, with the reason. The aggregates are cached in Redis per score matrix: a page that polls does not
bootstrap again until a score changes. Small suites are bootstrapped in the request (2 algorithms x 3 tasks x 2
seeds with 10,000 resamples: about 35 ms); a large one is sent to a worker (tasks.suite_aggregates) while the page
says so and asks again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections import Counter

import numpy as np
import redis
from django.urls import reverse

from rlweb.experiments import redis_keys
from rlweb.experiments.models import Event, Run
from rlweb.scores import METRICS
from rlweb.scores.normalise import normalise, reference
from rlweb.suites.models import Suite

logger = logging.getLogger(__name__)

SCORES = {"final": "final evaluation", "best": "best evaluation"}
METRIC_LABELS = {"iqm": "IQM", "median": "Median", "mean": "Mean", "optimality_gap": "Optimality gap"}
REPS = 10_000  # bootstrap resamples, as the speed target (rliable's examples use 50,000 for papers)
SEED = 0
INLINE_DRAWS = 1_000_000  # scores x reps up to this are bootstrapped in the request (about 0.1 s; 5 x 10 x 10
# x 10,000 took 0.6 to 1.5 s on a busy 2-core machine, and a cached page of those 500 runs 0.1 s)
CACHE_SECONDS = 7 * 24 * 3600
ENDED_UNSCORED = (Run.Status.FAILED, Run.Status.CANCELLED, Run.Status.PRUNED)  # a lost run may still resume


def normalised(env_id: str, score: float) -> float | None:
    """The score normalised against the environment's reference scores (rlweb.scores.normalise); None when it has
    none."""
    value = normalise(env_id, score)
    return None if value is None else float(value)


def reference_of(env_id: str) -> dict | None:
    """What a normalised score of 0 and of 1 stand for on the environment, and the sources of both."""
    found = reference(env_id)
    if found is None:
        return None
    return {"text": f"{found['kind']}: 0 = {found['low_label']} ({found['low']:g}), 1 = {found['high_label']} "
                    f"({found['high']:g})", "sources": found["sources"]}


def suite_runs(suite: Suite) -> list[Run]:
    return list(Run.objects.filter(experiment__suite_task__suite=suite).select_related(
        "experiment", "experiment__suite_task").order_by("experiment__suite_task__position", "seed"))


def run_score(run: Run, score: str) -> float | None:
    """A succeeded run's score: its final evaluation's mean return, or its best one's."""
    if run.status != Run.Status.SUCCEEDED:
        return None
    return run.best_eval_return if score == "best" else run.eval_return_mean


def latest_evaluations(runs: list[Run]) -> dict[int, float]:
    """The latest evaluation's mean return of each running run (one indexed query per running run)."""
    latest = {}
    for run in runs:
        if run.status == Run.Status.RUNNING:
            values = Event.objects.filter(run=run, kind="eval").order_by("-seq").values_list("values", flat=True).first()
            if values and values.get("eval/return_mean") is not None:
                latest[run.pk] = values["eval/return_mean"]
    return latest


def run_rows(suite: Suite, runs: list[Run], score: str) -> list[dict]:
    latest = latest_evaluations(runs)
    rows = []
    for run in runs:
        task = run.experiment.suite_task
        final = run_score(run, score)
        rows.append({"id": run.pk, "url": run.get_absolute_url(), "algorithm": task.algorithm, "env_id": task.env_id,
                     "seed": run.seed, "status": run.shown_status, "steps_done": run.steps_done,
                     "total_steps": run.total_steps, "progress": run.progress_percent,
                     "latest_eval": latest.get(run.pk, run.eval_return_mean), "score": final,
                     "normalised": None if final is None else normalised(task.env_id, final)})
    return rows


def score_table(suite: Suite, rows: list[dict]) -> list[dict]:
    """Per environment: each algorithm's mean and standard deviation of the scores over its seeds so far, and of
    the normalised scores."""
    table = []
    for env_id in suite.env_ids:
        cells = {}
        for algorithm in suite.algorithms:
            scores = [row["score"] for row in rows if row["env_id"] == env_id and row["algorithm"] == algorithm
                      and row["score"] is not None]
            normal = [normalised(env_id, value) for value in scores]
            normal = [value for value in normal if value is not None]
            cells[algorithm] = {"n": len(scores), "mean": float(np.mean(scores)) if scores else None,
                                "std": float(np.std(scores)) if scores else None,
                                "normalised": float(np.mean(normal)) if normal else None}
        table.append({"env_id": env_id, "normalisable": reference(env_id) is not None,
                      "reference": reference_of(env_id), "cells": cells})
    return table


def score_matrices(suite: Suite, rows: list[dict]) -> tuple[dict[str, np.ndarray], list[str], dict[str, str]]:
    """({algorithm: seeds x tasks of normalised scores}, the tasks used, {task left out: why})."""
    by_cell = {}
    for row in rows:
        if row["normalised"] is not None:
            by_cell.setdefault((row["algorithm"], row["env_id"]), {})[row["seed"]] = row["normalised"]
    used, left_out = [], {}
    for env_id in suite.env_ids:
        if reference(env_id) is None:
            left_out[env_id] = "no reference scores to normalise against"
            continue
        missing = sum(suite.num_seeds - len(by_cell.get((algorithm, env_id), {})) for algorithm in suite.algorithms)
        if missing:
            left_out[env_id] = missing_text(missing, sum(row["env_id"] == env_id and row["score"] is None
                                                         and row["status"] in ENDED_UNSCORED for row in rows))
            continue
        used.append(env_id)
    matrices = {algorithm: np.array([[by_cell[(algorithm, env_id)][seed] for env_id in used]
                                     for seed in sorted(by_cell.get((algorithm, used[0]), {}))])
                for algorithm in suite.algorithms} if used else {}
    return matrices, used, left_out


def missing_text(missing: int, ended: int) -> str:
    """"3 runs without a score yet", "1 run ended without a score (failed or cancelled)", or both."""
    def runs(count: int) -> str:
        return f"{count} run{'s' if count != 1 else ''}"
    parts = [f"{runs(ended)} ended without a score (failed or cancelled)"] if ended else []
    if missing > ended:
        parts.append(f"{runs(missing - ended)} without a score yet")
    return ", ".join(parts)


def cache_key(matrices: dict[str, np.ndarray], reps: int, seed: int) -> str:
    text = json.dumps({"reps": reps, "seed": seed, "m": {name: matrix.round(12).tolist() for name, matrix in
                                                         sorted(matrices.items())}})
    return f"rlweb:suite-aggregates:{hashlib.sha256(text.encode()).hexdigest()}"


def cached(key: str) -> dict | None:
    try:
        text = redis_keys.redis_client().get(key)
    except redis.RedisError:
        return None
    return json.loads(text) if text else None


def compute(matrices: dict[str, np.ndarray], reps: int = REPS, seed: int = SEED) -> dict:
    """The aggregates of the matrices, stored in Redis under their key: {algorithms: {name: {metric: [point, low,
    high]}}, reps, seconds}."""
    from rlweb.scores.aggregates import aggregate_scores  # scipy and rliable: 1-2 s of CPU at a web process's start

    started = time.perf_counter()
    estimates = aggregate_scores(matrices, reps, seed)
    result = {"algorithms": {name: {metric: list(values) for metric, values in found.items()}
                             for name, found in estimates.items()},
              "reps": reps, "seconds": round(time.perf_counter() - started, 3)}
    try:
        redis_keys.redis_client().set(cache_key(matrices, reps, seed), json.dumps(result), ex=CACHE_SECONDS)
    except redis.RedisError as error:
        logger.warning("cannot cache a suite's aggregates (%s)", error)
    return result


def is_small(matrices: dict[str, np.ndarray], reps: int = REPS) -> bool:
    return sum(matrix.size for matrix in matrices.values()) * reps <= INLINE_DRAWS


def aggregates(suite: Suite, rows: list[dict], score: str, inline: bool = True) -> dict:
    """{"ready": bool, "tasks": [...], "left_out": {...}, "algorithms": ..., "reps", "seconds"} for the page. When
    not cached, a small suite (`is_small`) is bootstrapped here; for a large one `computing` is true, and the caller
    sends it to a worker (tasks.send_aggregates)."""
    matrices, used, left_out = score_matrices(suite, rows)
    answer = {"ready": False, "tasks": used, "left_out": left_out, "metrics": list(METRICS),
              "labels": METRIC_LABELS, "runs_per_task": {name: int(matrix.shape[0]) for name, matrix in
                                                         matrices.items()}}
    if not used:
        return answer
    found = cached(cache_key(matrices, REPS, SEED))
    if found is None and (inline or is_small(matrices)):
        found = compute(matrices)
    if found is None:  # the caller sends it to a worker (views.page_data)
        return {**answer, "computing": True}
    return {**answer, **found, "ready": True}


def page_data(suite: Suite, score: str = "final", inline: bool = False) -> dict:
    """Everything the suite's page draws, as JSON; the report and the CSV read the same."""
    runs = suite_runs(suite)
    rows = run_rows(suite, runs, score)
    waiting = suite.tasks.filter(launched_at__isnull=True).count()
    counts = Counter(row["status"] for row in rows)
    if waiting:
        counts["waiting"] = waiting * suite.num_seeds
    return {"suite": {"id": suite.pk, "name": suite.name, "status": suite.status, "algorithms": suite.algorithms,
                      "env_ids": suite.env_ids, "num_seeds": suite.num_seeds, "total_steps": suite.total_steps,
                      "created": suite.created.isoformat(), "url": reverse("suite-detail", args=[suite.pk])},
            "score": score, "score_label": SCORES[score], "counts": dict(counts),
            "runs_total": len(suite.algorithms) * len(suite.env_ids) * suite.num_seeds,
            "active": suite.is_active, "runs": rows, "table": score_table(suite, rows),
            "aggregates": aggregates(suite, rows, score, inline=inline)}


def csv_rows(suite: Suite, score: str):
    """The score table, one row per run: what the page's run table shows."""
    yield ["suite", "algorithm", "env_id", "seed", "run", "status", "steps_done", f"score ({SCORES[score]})",
           "normalised_score"]
    for row in run_rows(suite, suite_runs(suite), score):
        yield [suite.name, row["algorithm"], row["env_id"], row["seed"], row["id"], row["status"], row["steps_done"],
               number(row["score"]), number(row["normalised"])]


def aggregate_csv_rows(data: dict):
    """The aggregates, one row per algorithm and metric, with the interval and what they were computed over."""
    found = data["aggregates"]
    yield ["algorithm", "metric", "value", "low_95", "high_95", "tasks", "runs_per_task", "bootstrap_reps"]
    for algorithm, values in (found.get("algorithms") or {}).items():
        for metric in found["metrics"]:
            point, low, high = values[metric]
            yield [algorithm, metric, number(point), number(low), number(high), " ".join(found["tasks"]),
                   found["runs_per_task"].get(algorithm), found["reps"]]


def number(value):
    return "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else value
