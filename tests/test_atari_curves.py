"""benchmarks.atari_curves reads a run's CSV export (the run page's download) as the site writes it."""

import csv

from benchmarks.atari_curves import read_run, window_means


def test_a_runs_csv_gives_its_episode_and_evaluation_returns_and_their_window_means(tmp_path):
    path = tmp_path / "run1-events.csv"
    with open(path, "w", newline="") as file:  # the columns of history.csv_rows: fixed ones, then a metric each
        writer = csv.writer(file)
        writer.writerow(["seq", "kind", "step", "time", "eval/return_mean", "rollout/episode_return", "train/loss"])
        writer.writerow([1, "started", 0, 0.0, "", "", ""])
        writer.writerow([2, "episode", 800, 1.0, "", "-21.0", ""])
        writer.writerow([3, "train", 900, 1.1, "", "", "0.01"])
        writer.writerow([4, "episode", 1700, 2.0, "", "-19.0", ""])
        writer.writerow([5, "eval", 2000, 2.5, "-20.5", "", ""])
        writer.writerow([6, "episode", 2600, 3.0, "", "-18.0", ""])
    episodes, evaluations = read_run(path)
    assert episodes == [(800, -21.0), (1700, -19.0), (2600, -18.0)] and evaluations == [(2000, -20.5)]
    assert window_means(episodes, 2000) == [(2000, -20.0, 2), (4000, -18.0, 1)]
