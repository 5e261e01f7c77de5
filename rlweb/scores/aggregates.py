"""Aggregate scores across tasks and runs, with stratified bootstrap intervals (Agarwal et al., 2021).

Point estimates are `rliable.metrics`' own functions. Intervals are rliable's stratified bootstrap: each
resample draws, for every task (and every point of a curve) on its own, as many runs as there are, with
replacement, exactly as `rliable.library.StratifiedBootstrap` does, and the 95% interval is the 2.5th and
97.5th percentile of the statistic over the resamples (arch's "percentile" method, rliable's default).
rliable draws one resample at a time through arch and calls the statistic once per draw, which takes
seconds per thousand draws; here all draws for a group come from one call of the same generator and the
statistic is computed for all of them at once with numpy. Seeded alike, the draws are the same numbers, so
the intervals are rliable's (tests/scores/test_aggregates.py checks them against rliable itself).

Each group draws from its own generator, `RandomState(seed)`, so a group's interval does not change when
another group joins the selection. Every matrix is runs x tasks of normalised scores (rlweb.scores.normalise).
"""

import numpy as np
import scipy.stats
from rliable import metrics

from rlweb.scores import METRICS

CONFIDENCE = 0.95
DRAWS_PER_CHUNK = 4_000_000  # resampled cells held in memory at once


def _percentiles(confidence: float = CONFIDENCE) -> list[float]:
    """The percentiles arch takes for a two-sided interval (written its way, so the floats agree)."""
    alpha = (1.0 - confidence) / 2
    return [100 * alpha, 100 * (1.0 - alpha)]


def _check(name: str, scores: np.ndarray, ndim: int) -> np.ndarray:
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != ndim or 0 in scores.shape:
        raise ValueError(f"{name}: expected a non-empty array of {ndim} dimensions, got shape {scores.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{name}: scores must be finite numbers")
    return scores


def _resamples(scores: np.ndarray, reps: int, rng: np.random.RandomState):
    """Stratified bootstrap resamples of `scores` (runs x tasks [x points]), in chunks of reps.

    rliable's StratifiedBootstrap draws `np.random.choice(runs, scores.shape)` per resample and takes
    scores[drawn[i, j, ...], j, ...]; drawing all resamples in consecutive calls gives the same numbers.
    """
    runs, cells = scores.shape[0], scores[0].size
    flat, offsets = scores.ravel(), np.arange(cells).reshape(scores.shape[1:])  # the cell of each task (and point)
    chunk = max(1, DRAWS_PER_CHUNK // scores.size)
    for start in range(0, reps, chunk):
        drawn = rng.choice(runs, (min(chunk, reps - start), *scores.shape), replace=True)
        yield np.take(flat, drawn * cells + offsets)


def _batch_metrics(resampled: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """The four aggregates of a batch of runs x tasks matrices (batch x runs x tasks) -> batch x 4."""
    batch = resampled.shape[0]
    task_means = resampled.mean(axis=1)
    return np.stack([
        scipy.stats.trim_mean(resampled.reshape(batch, -1), proportiontocut=0.25, axis=1),
        np.median(task_means, axis=1),
        task_means.mean(axis=1),
        gamma - np.minimum(resampled, gamma).reshape(batch, -1).mean(axis=1),
    ], axis=1)


def _interval(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low, high = np.percentile(values, _percentiles(), axis=0)
    return low, high


def aggregate_scores(score_matrices: dict[str, np.ndarray], reps: int = 2000,
                     seed: int = 0) -> dict[str, dict[str, tuple[float, float, float]]]:
    """group -> {"iqm", "median", "mean", "optimality_gap"} -> (point, low, high), 95% intervals."""
    result = {}
    for group, scores in score_matrices.items():
        scores = _check(group, scores, 2)
        point = [metrics.aggregate_iqm(scores), metrics.aggregate_median(scores),
                 metrics.aggregate_mean(scores), metrics.aggregate_optimality_gap(scores)]
        rng = np.random.RandomState(seed)
        values = np.concatenate([_batch_metrics(batch) for batch in _resamples(scores, reps, rng)])
        low, high = _interval(values)
        result[group] = {name: (float(point[i]), float(low[i]), float(high[i])) for i, name in enumerate(METRICS)}
    return result


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = 2000,
                               seed: int = 0) -> tuple[float, float, float]:
    """P(X > Y) on a task, averaged over tasks, with its 95% interval: (point, low, high).

    x and y are runs x tasks (their runs may differ in number); each resample draws x's runs then y's,
    per task, as rliable's StratifiedIndependentBootstrap does. A task's probability is the Mann-Whitney
    U statistic over nx * ny, which counts ties as half, as rliable's does.
    """
    x, y = _check("x", x, 2), _check("y", y, 2)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same tasks, got {x.shape[1]} and {y.shape[1]}")
    point = metrics.probability_of_improvement(x, y)
    rng = np.random.RandomState(seed)
    tasks = np.arange(x.shape[1])
    values = np.empty(reps)
    chunk = max(1, DRAWS_PER_CHUNK // (x.shape[0] * y.shape[0] * x.shape[1]))
    for start in range(0, reps, chunk):
        size = min(chunk, reps - start)
        if x.shape == y.shape:  # x's draws then y's, per resample, from one range: one call draws them all
            drawn = rng.choice(x.shape[0], (size, 2, *x.shape))
            xs, ys = x[drawn[:, 0], tasks], y[drawn[:, 1], tasks]  # size x runs x tasks
        else:
            drawn = [(rng.choice(x.shape[0], x.shape), rng.choice(y.shape[0], y.shape)) for _ in range(size)]
            xs = np.stack([x[dx, tasks] for dx, _ in drawn])
            ys = np.stack([y[dy, tasks] for _, dy in drawn])
        wins = (xs[:, :, None, :] > ys[:, None, :, :]).mean(axis=(1, 2))
        ties = (xs[:, :, None, :] == ys[:, None, :, :]).mean(axis=(1, 2))
        values[start:start + size] = (wins + 0.5 * ties).mean(axis=1)
    low, high = np.percentile(values, _percentiles())
    return float(point), float(low), float(high)


def performance_profiles(score_matrices: dict[str, np.ndarray], taus: np.ndarray, reps: int = 2000,
                         seed: int = 0) -> dict[str, dict]:
    """group -> {"taus", "point", "low", "high"}: the fraction of runs (over all tasks) scoring above each tau.

    rliable's create_performance_profile with its defaults (score distributions, runs resampled per task).
    """
    taus = np.asarray(taus, dtype=float)
    result = {}
    for group, scores in score_matrices.items():
        scores = _check(group, scores, 2)
        point = (scores[..., None] > taus).mean(axis=(0, 1))
        rng = np.random.RandomState(seed)
        values = np.concatenate([(batch[..., None] > taus).mean(axis=(1, 2))
                                 for batch in _resamples(scores, reps, rng)])
        low, high = _interval(values)
        result[group] = {"taus": taus.tolist(), "point": point.tolist(), "low": low.tolist(), "high": high.tolist()}
    return result


def sample_efficiency(curves: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> dict[str, dict]:
    """group -> {"point", "low", "high"}: the IQM of the scores at each point of the curves, with intervals.

    Each curve array is runs x tasks x points, every run evaluated at the same points (the caller puts them
    on one grid of steps). As rliable's own sample-efficiency curves, runs are resampled per task and point.
    """
    result = {}
    for group, scores in curves.items():
        scores = _check(group, scores, 3)
        runs, tasks, points = scores.shape
        point = np.array([metrics.aggregate_iqm(scores[..., p]) for p in range(points)])
        rng = np.random.RandomState(seed)
        values = np.concatenate([  # the IQM over runs and tasks, per point (taken on a contiguous last axis)
            scipy.stats.trim_mean(batch.reshape(-1, runs * tasks, points).transpose(0, 2, 1).copy(),
                                  proportiontocut=0.25, axis=2)
            for batch in _resamples(scores, reps, rng)])
        low, high = _interval(values)
        result[group] = {"point": point.tolist(), "low": low.tolist(), "high": high.tolist()}
    return result
