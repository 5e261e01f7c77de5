"""compare.py: seed aggregation on a common grid against hand-computed values, the hyperparameter diff,
groups, the summary table, and which runs a user may compare."""

import math
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from rlweb.experiments import compare, history, lifecycle
from rlweb.experiments.models import Event, MetricBucket, Run

SQRT2 = math.sqrt(2)

# two seeds on unequal step grids: A is y = x on 0, 10, 20; B passes (0, 2), (5, 4), (20, 8)
SEED_A = ([0, 10, 20], [0, 10, 20])
SEED_B = ([0, 5, 20], [2, 4, 8])
GRID = [0, 10, 20]
B_AT_10 = 4 + (10 - 5) / (20 - 5) * (8 - 4)  # 5.333..., B interpolated between its points at 5 and 20


def add_events(run, kind, points, first_seq=None):
    """Stored events with their downsampled summary, as the Redis sink keeps them: points are (step, values)."""
    first_seq = first_seq or (Event.objects.filter(run=run).count() + 1)
    events = Event.objects.bulk_create(
        Event(run=run, seq=first_seq + index, kind=kind, step=step, time=step / 100, values=values)
        for index, (step, values) in enumerate(points))
    history.summarize(run.pk, events)
    return events


def returns(run, steps, values):
    add_events(run, "episode", [(step, {"rollout/episode_return": value, "rollout/episode_length": 10})
                                for step, value in zip(steps, values)])


@pytest.fixture
def make_run(make_experiment):
    def make(experiment=None, seed=0, **experiment_fields) -> Run:
        experiment = experiment or make_experiment(**experiment_fields)
        return Run.objects.create(experiment=experiment, seed=seed, total_steps=experiment.total_steps)

    return make


# --- aggregation -------------------------------------------------------------------------------------

def test_the_mean_and_std_band_of_two_seeds_on_unequal_grids_match_hand_computed_values():
    result = compare.aggregate([SEED_A, SEED_B], band="std", grid=GRID)
    assert result["x"] == GRID and result["count"] == [2, 2, 2] and result["seeds"] == 2
    assert result["mean"] == pytest.approx([1.0, (10 + B_AT_10) / 2, 14.0])
    spread = [2 / SQRT2, (10 - B_AT_10) / SQRT2, 12 / SQRT2]  # sample std of two values: |a - b| / sqrt(2)
    assert result["lower"] == pytest.approx([m - s for m, s in zip(result["mean"], spread)])
    assert result["upper"] == pytest.approx([m + s for m, s in zip(result["mean"], spread)])


def test_the_min_max_band_is_the_lowest_and_highest_seed_at_each_grid_point():
    result = compare.aggregate([SEED_A, SEED_B], band="minmax", grid=GRID)
    assert result["lower"] == pytest.approx([0.0, B_AT_10, 8.0])
    assert result["upper"] == pytest.approx([2.0, 10.0, 20.0])


def test_the_bootstrap_interval_of_two_seeds_spans_them_and_is_the_same_each_time():
    # resampling two seeds gives means a, (a+b)/2 and b with chances 1/4, 1/2, 1/4: the 2.5 and 97.5
    # percentiles of a thousand draws are a and b
    result = compare.aggregate([SEED_A, SEED_B], band="ci95", grid=GRID)
    assert result["lower"] == pytest.approx([0.0, B_AT_10, 8.0])
    assert result["upper"] == pytest.approx([2.0, 10.0, 20.0])
    assert compare.aggregate([SEED_A, SEED_B], band="ci95", grid=GRID) == result


def test_the_bootstrap_interval_of_many_seeds_lies_inside_their_range_around_the_mean():
    curves = [([0, 10], [value, value]) for value in (0.0, 1.0, 2.0, 3.0, 10.0)]
    result = compare.aggregate(curves, band="ci95", grid=[0, 10])
    assert result["mean"] == pytest.approx([3.2, 3.2])
    assert 0.0 < result["lower"][0] < 3.2 < result["upper"][0] < 10.0


@pytest.mark.parametrize("band", sorted(compare.BANDS))
def test_one_seed_is_its_own_mean_with_a_band_of_no_width(band):
    result = compare.aggregate([SEED_B], band=band, grid=GRID)
    assert result["mean"] == result["lower"] == result["upper"] == pytest.approx([2.0, B_AT_10, 8.0])
    assert result["seeds"] == 1 and result["count"] == [1, 1, 1]


def test_a_run_without_points_is_left_out_of_its_group():
    assert compare.aggregate([SEED_A, ([], []), SEED_B], grid=GRID) == compare.aggregate([SEED_A, SEED_B], grid=GRID)
    assert compare.aggregate([([], [])]) == {"x": [], "mean": [], "lower": [], "upper": [], "count": [], "seeds": 0}


def test_the_common_grid_spans_every_seed_and_each_seed_counts_only_where_it_has_data():
    early, late = ([0, 20], [0, 4]), ([10, 30], [1, 3])
    grid = compare.common_grid([early, late], points=4)
    assert grid.tolist() == [0, 10, 20, 30]
    result = compare.aggregate([early, late], band="std", grid=grid)
    assert result["count"] == [1, 2, 2, 1]  # no extrapolation beyond a seed's first or last point
    assert result["mean"] == pytest.approx([0.0, 1.5, 3.0, 3.0])
    assert result["upper"] == pytest.approx([0.0, 1.5 + 0.5 * SQRT2, 3.0 + SQRT2, 3.0])


def test_the_default_grid_has_grid_points_from_the_first_to_the_last_step():
    result = compare.aggregate([SEED_A, SEED_B])
    assert len(result["x"]) == compare.GRID_POINTS and result["x"][0] == 0 and result["x"][-1] == 20
    assert np.allclose(np.diff(result["x"]), 20 / (compare.GRID_POINTS - 1))


def test_points_given_out_of_order_are_sorted_before_interpolating():
    assert compare.aggregate([([20, 0, 10], [20, 0, 10])], grid=GRID)["mean"] == pytest.approx([0, 10, 20])


# --- selection ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, expected", [
    (["3,7,9"], [3, 7, 9]), (["3", "7"], [3, 7]), (["3, 7,,9,"], [3, 7, 9]), (["7,3,7"], [7, 3]), ([""], []),
    (["3 7+9"], [3, 7, 9]), ([], []),
])
def test_run_ids_are_read_in_order_once_each(values, expected):
    assert compare.parse_run_ids(values) == expected


@pytest.mark.parametrize("values", [["abc"], ["3,x"], ["-1"], ["9" * 30], ["3.5"], ["٣"], [",".join(map(str, range(51)))],
                                    [",".join(map(str, range(200_000)))]])
def test_bad_run_ids_are_refused_with_a_message(values):
    with pytest.raises(compare.SelectionError) as error:
        compare.parse_run_ids(values)
    assert "run" in str(error.value)


def test_runs_of_other_users_and_missing_runs_are_left_out_and_only_counted(owner, stranger, make_run, make_experiment):
    mine = make_run()
    theirs = make_run(experiment=make_experiment(owner=stranger, name="secret"))
    runs, left_out = compare.select_runs(owner, [theirs.pk, mine.pk, 999_999])
    assert runs == [mine] and left_out == 2


# --- groups, hyperparameters, summary ----------------------------------------------------------------

def test_the_diff_shows_the_one_key_two_runs_differ_in(make_run, make_experiment):
    first = make_run(experiment=make_experiment(hyperparameters={"learning_rate": 0.001, "gamma": 0.99}))
    second = make_run(experiment=make_experiment(hyperparameters={"learning_rate": 0.01, "gamma": 0.99}))
    rows = compare.hyperparameter_rows([first, second])
    assert [row["name"] for row in rows if row["differs"]] == ["learning_rate"]
    assert {row["name"]: row["values"] for row in rows}["learning_rate"] == [0.001, 0.01]
    assert {row["name"]: row["values"] for row in rows}["gamma"] == [0.99, 0.99]


def test_a_setting_only_one_algorithm_has_differs_and_is_blank_for_the_other(make_run, make_experiment):
    dqn = make_run(experiment=make_experiment(hyperparameters={"gamma": 0.99, "target_update_interval": 50}))
    ppo = make_run(experiment=make_experiment(algorithm="ppo", hyperparameters={"gamma": 0.99}))
    rows = {row["name"]: row for row in compare.hyperparameter_rows([dqn, ppo])}
    assert rows["target_update_interval"]["values"] == [50, None] and rows["target_update_interval"]["differs"]
    assert rows["algorithm"]["differs"] and not rows["gamma"]["differs"]
    assert "hp:target_update_interval" in compare.grouping_choices([dqn, ppo])


def test_groups_by_experiment_average_their_seeds_on_a_common_grid(make_run, make_experiment):
    sweep, other = make_experiment(name="sweep"), make_experiment(name="other", algorithm="ppo")
    seed0, seed1, lone = make_run(sweep, seed=0), make_run(sweep, seed=1), make_run(other)
    returns(seed0, [0, 50, 100], [0.0, 5.0, 10.0])  # step / 10
    returns(seed1, [0, 30, 100], [2.0, 5.0, 12.0])  # step / 10 + 2, on other steps
    returns(lone, [0, 100], [7.0, 7.0])
    data = compare.comparison([seed0, lone, seed1], compare.Options(group="experiment", band="std"))
    metric = next(metric for metric in data["metrics"] if metric["key"] == "rollout/episode_return")
    first, second = metric["groups"]
    assert (first["label"], first["runs"], first["seeds"]) == (f"sweep #{sweep.pk}", [seed0.pk, seed1.pk], 2)
    assert np.allclose(first["mean"], np.array(first["x"]) / 10 + 1)
    assert np.allclose(np.array(first["upper"]) - first["mean"], SQRT2)  # two seeds 2 apart
    assert second["seeds"] == 1 and set(second["mean"]) == {7.0} and second["lower"] == second["mean"]
    by_algorithm = compare.comparison([seed0, lone, seed1], compare.Options(group="algorithm"))
    assert [group["label"] for group in by_algorithm["metrics"][0]["groups"]] == ["dqn", "ppo"]


def test_groups_by_a_hyperparameter_and_along_wall_time(make_run, make_experiment):
    slow = make_run(experiment=make_experiment(hyperparameters={"learning_rate": 0.001}))
    fast = make_run(experiment=make_experiment(hyperparameters={"learning_rate": 0.01}))
    returns(slow, [0, 100], [0.0, 1.0])
    returns(fast, [0, 200], [0.0, 2.0])
    data = compare.comparison([slow, fast], compare.Options(group="hp:learning_rate", x="time"))
    groups = data["metrics"][0]["groups"]
    assert [group["label"] for group in groups] == ["learning_rate=0.001", "learning_rate=0.01"]
    assert groups[1]["x"][-1] == 2.0  # wall seconds: the events' time is step / 100


def test_a_metric_is_compared_when_every_run_reporting_its_namespace_has_it(make_run):
    first, second, empty = make_run(), make_run(), make_run()
    returns(first, [10], [1.0])
    returns(second, [10], [2.0])
    add_events(first, "train", [(10, {"train/loss": 0.5, "train/epsilon": 0.9})])
    add_events(second, "train", [(10, {"train/loss": 0.4, "train/entropy": 0.6})])
    add_events(first, "eval", [(10, {"eval/return_mean": 3.0})])  # the second has not evaluated yet
    data = compare.comparison([first, second, empty], compare.Options())
    assert [metric["key"] for metric in data["metrics"]] == [
        "rollout/episode_return", "eval/return_mean", "rollout/episode_length", "train/loss"]
    assert data["metrics"][1]["runs"][second.pk] is None
    assert data["metrics"][0]["runs"][empty.pk] is None
    assert data["metrics"][0]["runs"][first.pk]["value"] == [1.0] and "groups" not in data["metrics"][0]
    assert data["without_points"] == [empty.pk]


def test_a_long_curve_is_thinned_for_drawing_keeping_its_peaks_and_dips():
    values = [float(index % 7) for index in range(1000)]
    values[333], values[777] = 100.0, -100.0
    series = {"step": list(range(0, 10_000, 10)), "time": [step / 2 for step in range(1000)], "value": values}
    drawn = compare.for_drawing(series, "step", max_points=100)
    assert 90 <= len(drawn["x"]) <= 102 and drawn["x"] == sorted(drawn["x"])
    assert (100.0, 3330) in zip(drawn["value"], drawn["x"]) and (-100.0, 7770) in zip(drawn["value"], drawn["x"])
    window = 1000 // 50  # each window of 20 points keeps its smallest and largest value
    assert drawn["value"][:2] == [min(values[:window]), max(values[:window])]  # the first point is the minimum
    assert drawn["x"][-1] == 9990  # the last point stays
    assert compare.for_drawing(series, "time", max_points=100)["x"][-1] == 499.5
    short = {"step": [1, 2], "time": [0.1, 0.2], "value": [5.0, 6.0]}
    assert compare.for_drawing(short, "time") == {"x": [0.1, 0.2], "value": [5.0, 6.0]}
    assert compare.for_drawing(None, "step") is None


def test_the_summary_has_final_and_best_returns_steps_to_a_threshold_time_speed_and_device(make_run):
    run = make_run()
    started = timezone.now() - timedelta(seconds=500)
    Run.objects.filter(pk=run.pk).update(status="succeeded", steps_done=4000, started_at=started,
                                         finished_at=started + timedelta(seconds=100), device_used="cuda:0")
    run.refresh_from_db()
    add_events(run, "eval", [(step, {"eval/return_mean": value, "eval/return_std": 1.0})
                             for step, value in [(1000, 10.0), (2000, 50.0), (3000, 120.0), (4000, 90.0)]])
    evaluations = history.metric_series(run)["eval/return_mean"]
    row = compare.summary_row(run, evaluations, threshold=100.0)
    assert (row["final_eval_return"], row["best_eval_return"], row["steps_to_threshold"]) == (90.0, 120.0, 3000)
    assert (row["wall_seconds"], row["steps_per_second"], row["device"]) == (100.0, 40.0, "cuda:0")
    assert compare.summary_row(run, evaluations, threshold=50.0)["steps_to_threshold"] == 2000
    assert compare.summary_row(run, evaluations, threshold=500.0)["steps_to_threshold"] is None
    Run.objects.filter(pk=run.pk).update(eval_return_mean=95.0, best_eval_return=125.0)
    run.refresh_from_db()
    stored = compare.summary_row(run, evaluations, threshold=None)
    assert (stored["final_eval_return"], stored["best_eval_return"], stored["steps_to_threshold"]) == (95.0, 125.0, None)


def test_a_resumed_runs_wall_time_is_the_whole_run_and_its_speed_that_of_its_current_attempt(make_run):
    run = make_run()
    started = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(status="cancelled", first_started_at=started, started_at=started,
                                         attempts=1, finished_at=started + timedelta(seconds=300))
    run.refresh_from_db()
    assert lifecycle.resume(run)
    resumed, _ = lifecycle.claim(run.pk, worker="test")
    # the second attempt went on from step 3000 to 4000 in 100 s
    Run.objects.filter(pk=run.pk).update(status="succeeded", start_step=3000, steps_done=4000,
                                         finished_at=resumed.started_at + timedelta(seconds=100))
    run.refresh_from_db()
    row = compare.summary_row(run, None, threshold=None)
    assert (row["wall_seconds"], row["steps_per_second"]) == (400.0, 10.0)


def test_a_run_that_has_not_started_has_an_empty_summary(make_run):
    row = compare.summary_row(make_run(device="cpu"), None, threshold=1.0)
    assert row["final_eval_return"] is row["best_eval_return"] is row["wall_seconds"] is row["steps_per_second"] is None
    assert row["steps_to_threshold"] is None and row["device"] == "cpu"


def test_percentiles_match_numpys_nanpercentile():
    samples = np.random.default_rng(3).normal(size=(1000, 7))
    samples[::3, 2] = np.nan
    samples[1:, 5] = np.nan  # one value left in a column
    for percent in (2.5, 50, 97.5):
        assert np.allclose(compare.percentiles(samples, percent), np.nanpercentile(samples, percent, axis=0))


def test_steps_to_a_threshold_are_exact_in_a_long_run_read_through_its_buckets(make_run, monkeypatch):
    monkeypatch.setattr(history, "MAX_BUCKETS", 4)  # 100 evaluations in at most 4 buckets of 32
    run = make_run()
    add_events(run, "train", [(step, {"train/loss": 1.0}) for step in range(5, 1000, 10)])  # other kinds between
    returns_at = {step: float(step // 10) for step in range(10, 1010, 10)}  # 1, 2, ..., 100
    returns_at[430] = 50.0  # an early crossing of 50, in a bucket whose largest value (64) comes later
    add_events(run, "eval", [(step, {"eval/return_mean": value}) for step, value in returns_at.items()])
    assert MetricBucket.objects.filter(run=run, key="eval/return_mean").count() <= 4
    assert compare.steps_to_reach(run, 50.0) == 430
    assert compare.steps_to_reach(run, 80.0) == 800  # not 960, where its bucket peaks
    assert compare.steps_to_reach(run, 1.0) == 10
    assert compare.steps_to_reach(run, 100.0) == 1000
    assert compare.steps_to_reach(run, 100.5) is None
