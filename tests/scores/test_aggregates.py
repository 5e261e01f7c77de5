"""Our aggregates are rliable's: the same point estimates, and the same intervals from the same draws."""

import numpy as np
import pytest
from rliable import library, metrics

from rlweb.scores import aggregates

REPS = 300


def score_matrices():
    rng = np.random.default_rng(7)
    return {"ppo": rng.normal(1.0, 0.5, size=(5, 4)), "dqn": rng.normal(0.6, 0.4, size=(3, 4))}


def four_metrics(scores):
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_median(scores),
                     metrics.aggregate_mean(scores), metrics.aggregate_optimality_gap(scores)])


def test_aggregates_equal_rliables_point_estimates_and_intervals():
    ours = aggregates.aggregate_scores(score_matrices(), reps=REPS, seed=3)
    for group, scores in score_matrices().items():
        np.random.seed(3)  # rliable's bootstrap draws from numpy's global generator
        points, intervals = library.get_interval_estimates({group: scores}, four_metrics, reps=REPS)
        for i, name in enumerate(aggregates.METRICS):
            point, low, high = ours[group][name]
            assert point == pytest.approx(points[group][i], abs=1e-12)
            assert (low, high) == pytest.approx((intervals[group][0, i], intervals[group][1, i]), abs=1e-12)
            assert low <= point <= high or name == "median"


def test_intervals_are_reproducible_with_a_seed_and_change_with_another():
    first = aggregates.aggregate_scores(score_matrices(), reps=REPS, seed=1)
    assert aggregates.aggregate_scores(score_matrices(), reps=REPS, seed=1) == first
    assert aggregates.aggregate_scores(score_matrices(), reps=REPS, seed=2) != first


def test_a_groups_interval_does_not_depend_on_the_other_groups():
    alone = aggregates.aggregate_scores({"dqn": score_matrices()["dqn"]}, reps=REPS)
    assert aggregates.aggregate_scores(score_matrices(), reps=REPS)["dqn"] == alone["dqn"]


def test_probability_of_improvement_equals_rliables():
    ppo, dqn = score_matrices()["ppo"], score_matrices()["dqn"]
    dqn[:, 0] = ppo[:3, 0]  # a tie on one task
    ours = aggregates.probability_of_improvement(ppo, dqn, reps=REPS, seed=5)
    np.random.seed(5)
    points, intervals = library.get_interval_estimates(
        {"pair": [ppo, dqn]}, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps=REPS)
    assert ours == pytest.approx((points["pair"][0], intervals["pair"][0, 0], intervals["pair"][1, 0]), abs=1e-12)
    assert 0.5 < ours[0] <= 1


def test_probability_of_improvement_with_as_many_runs_each_equals_rliables():
    ppo, dqn = score_matrices()["ppo"][:3], score_matrices()["dqn"]
    ours = aggregates.probability_of_improvement(ppo, dqn, reps=REPS, seed=6)
    np.random.seed(6)
    points, intervals = library.get_interval_estimates(
        {"pair": [ppo, dqn]}, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps=REPS)
    assert ours == pytest.approx((points["pair"][0], intervals["pair"][0, 0], intervals["pair"][1, 0]), abs=1e-12)


def test_performance_profiles_equal_rliables():
    taus = np.linspace(0, 2, 11)
    ours = aggregates.performance_profiles(score_matrices(), taus, reps=REPS, seed=4)
    np.random.seed(4)
    for group, scores in score_matrices().items():
        np.random.seed(4)
        points, intervals = library.create_performance_profile({group: scores}, taus, reps=REPS)
        assert ours[group]["point"] == pytest.approx(points[group].tolist())
        assert ours[group]["low"] == pytest.approx(intervals[group][0].tolist())
        assert ours[group]["high"] == pytest.approx(intervals[group][1].tolist())


def test_sample_efficiency_equals_rliables_iqm_per_point():
    rng = np.random.default_rng(11)
    curves = {"ppo": np.cumsum(rng.random((4, 3, 6)), axis=2)}
    ours = aggregates.sample_efficiency(curves, reps=REPS, seed=9)
    np.random.seed(9)
    points, intervals = library.get_interval_estimates(
        curves, lambda s: np.array([metrics.aggregate_iqm(s[..., p]) for p in range(s.shape[-1])]), reps=REPS)
    assert ours["ppo"]["point"] == pytest.approx(points["ppo"].tolist())
    assert ours["ppo"]["low"] == pytest.approx(intervals["ppo"][0].tolist())
    assert ours["ppo"]["high"] == pytest.approx(intervals["ppo"][1].tolist())
    assert ours["ppo"]["point"] == sorted(ours["ppo"]["point"])


def test_draws_in_chunks_are_the_draws_in_one(monkeypatch):
    whole = aggregates.aggregate_scores(score_matrices(), reps=REPS)
    monkeypatch.setattr(aggregates, "DRAWS_PER_CHUNK", 50)
    assert aggregates.aggregate_scores(score_matrices(), reps=REPS) == whole


def test_it_refuses_empty_or_unfinished_scores():
    with pytest.raises(ValueError, match="ppo"):
        aggregates.aggregate_scores({"ppo": np.empty((0, 3))})
    with pytest.raises(ValueError, match="finite"):
        aggregates.aggregate_scores({"ppo": np.array([[1.0, np.nan]])})
    with pytest.raises(ValueError, match="same tasks"):
        aggregates.probability_of_improvement(np.ones((2, 3)), np.ones((2, 4)))
