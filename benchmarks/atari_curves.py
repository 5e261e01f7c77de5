"""Pong curves: runs' training and evaluation returns (each run's CSV, from its page) next to Dopamine's.

    python -m benchmarks atari_curves --csv run1-events.csv [run2-events.csv ...] [--names dqn rainbow] [--png out.png]

Prints, per run, the mean training-episode return over each window of `--window` env steps and the evaluations;
with `--png`, draws the curves with Dopamine's next to them (plotly.js from the plotly package, in Chromium).

The reference: Dopamine's baselines (google/dopamine, baselines/atari/data/pong.json), the mean return of the
training episodes over each iteration of 250,000 agent steps (1M frames), with sticky actions as ALE/Pong-v5 has
them. Two runs each of its DQN and Rainbow, iterations 0 and 1: agent steps 0-250k and 250k-500k.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from benchmarks._figures import save_png

DOPAMINE_ITERATION_STEPS = 250_000
DOPAMINE_PONG = {  # agent -> runs -> mean training return per iteration
    "Dopamine DQN": [[-20.33, -19.31], [-20.32, -19.19]],
    "Dopamine Rainbow": [[-20.46, -20.60], [-20.41, -20.52]],
}


def read_run(path: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The (step, return) of each training episode and each evaluation in a run's CSV export."""
    episodes, evaluations = [], []
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            if row["kind"] == "episode":
                episodes.append((int(row["step"]), float(row["rollout/episode_return"])))
            elif row["kind"] == "eval":
                evaluations.append((int(row["step"]), float(row["eval/return_mean"])))
    return episodes, evaluations


def window_means(episodes: list[tuple[int, float]], window: int) -> list[tuple[int, float, int]]:
    """(window end, mean return, episodes) of the training episodes that ended in each window of env steps."""
    windows: dict[int, list[float]] = {}
    for step, value in episodes:
        windows.setdefault(step // window, []).append(value)
    return [((index + 1) * window, statistics.fmean(values), len(values)) for index, values in sorted(windows.items())]


def draw(runs: dict[str, tuple[list, list]], window: int, png: Path) -> None:
    import plotly.graph_objects as go

    figure = go.Figure()
    for name, (episodes, evaluations) in runs.items():
        means = window_means(episodes, window)
        figure.add_scatter(x=[step for step, _ in episodes], y=[value for _, value in episodes], mode="markers",
                           marker={"size": 3, "opacity": 0.25}, name=f"{name}: training episodes")
        figure.add_scatter(x=[end - window / 2 for end, _, _ in means], y=[mean for _, mean, _ in means],
                           mode="lines+markers", name=f"{name}: mean per {window // 1000}k steps")
        if evaluations:
            figure.add_scatter(x=[step for step, _ in evaluations], y=[value for _, value in evaluations],
                               mode="markers", marker={"symbol": "diamond", "size": 9}, name=f"{name}: evaluations")
    for agent, agent_runs in DOPAMINE_PONG.items():
        for number, iterations in enumerate(agent_runs, 1):
            xs, ys = [], []
            for index, value in enumerate(iterations):
                xs += [index * DOPAMINE_ITERATION_STEPS, (index + 1) * DOPAMINE_ITERATION_STEPS, None]
                ys += [value, value, None]
            figure.add_scatter(x=xs, y=ys, mode="lines", line={"dash": "dash", "width": 2},
                               name=f"{agent}, run {number} (mean per iteration)")
    figure.update_layout(title="ALE/Pong-v5: episode return against env steps (agent steps of 4 frames)",
                         xaxis_title="env steps", yaxis_title="episode return",
                         width=1200, height=650, template="plotly_white")
    save_png(figure, png, width=1200, height=650)
    print(f"wrote {png}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks atari_curves")
    parser.add_argument("--csv", nargs="+", type=Path, default=[], help="runs' events.csv (their page's CSV download)")
    parser.add_argument("--names", nargs="+", help="one name per CSV (default: the file names)")
    parser.add_argument("--window", type=int, default=50_000)
    parser.add_argument("--png", type=Path)
    args = parser.parse_args(argv)
    if not args.csv:
        print("nothing to draw: give --csv with the events.csv of one or more runs (from their pages)")
        return
    names = args.names or [path.stem for path in args.csv]
    if len(names) != len(args.csv):
        parser.error("give one name per CSV file")
    runs = {name: read_run(path) for name, path in zip(names, args.csv)}
    for name, (episodes, evaluations) in runs.items():
        print(f"{name}: {len(episodes)} training episodes, {len(evaluations)} evaluations")
        for end, mean, count in window_means(episodes, args.window):
            print(f"  env steps {end - args.window:>9,}-{end:>9,}: mean training return {mean:6.2f} ({count} episodes)")
        for step, value in evaluations:
            print(f"  evaluation at {step:>9,}: {value:6.2f}")
    for agent, agent_runs in DOPAMINE_PONG.items():
        print(f"{agent}: mean training return per {DOPAMINE_ITERATION_STEPS:,}-step iteration, per run: "
              + "; ".join(json.dumps(iterations) for iterations in agent_runs))
    if args.png:
        draw(runs, args.window, args.png)
