"""Policy gradient: env steps to solve CartPole, PPO on Pendulum, RND against plain PPO on a sparse task,
and PPO / A2C speed against stable-baselines3.

    python -m benchmarks policy_gradient                # everything (about an hour on 2 busy cores)
    python -m benchmarks policy_gradient --cartpole     # env steps to a 475 eval return, 4 algorithms x 3 seeds
    python -m benchmarks policy_gradient --pendulum     # PPO to -200 on Pendulum-v1, 3 seeds
    python -m benchmarks policy_gradient --sparse       # rnd-ppo vs ppo on sparse MountainCar, eval curves
                                                        # (drawn in docs/benchmarks/rnd-vs-ppo.png)
    python -m benchmarks policy_gradient --speed        # PPO and A2C env steps/s vs SB3, interleaved runs
    python -m benchmarks policy_gradient --speed --sb3-one-thread   # only SB3 at one thread

Every run uses one torch thread, as the training workers do (TORCH_THREADS); the SB3 runs are timed with
one thread and with torch's default. Speeds are compared as ratios of interleaved runs: identical runs on
one machine differ by up to 15% in time.
Evaluation returns are the mean of 10 deterministic episodes on a separate env.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import trainer
from benchmarks._figures import save_png
from trainer.events import Sink

SEEDS = (0, 1, 2)
DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, before main() sets one thread
CARTPOLE_SOLVED = 475.0
PENDULUM_SOLVED = -200.0

# each algorithm's own defaults are its CartPole settings (the zoo's for PPO and A2C); budget and eval interval
CARTPOLE_RUNS = {
    "ppo": dict(budget=100_000, eval_interval=4_096, settings={}),
    "a2c": dict(budget=500_000, eval_interval=5_000, settings={}),
    "vpg": dict(budget=300_000, eval_interval=5_000, settings={}),
    "reinforce": dict(budget=300_000, eval_interval=5_000, settings={}),
}
# the zoo reaches -172 at 100k with gSDE, which we do not have; a plain Gaussian policy with the zoo's
# discount, observation normalisation and 10 epochs
PENDULUM = dict(num_envs=4, n_steps=512, batch_size=64, n_epochs=10, gamma=0.9, gae_lambda=0.95,
                learning_rate=1e-3, clip_schedule="constant", normalize_observations=True)
PENDULUM_BUDGET = 200_000
# the same PPO settings for both; rnd-ppo adds its exploration bonus (and its own defaults for it)
SPARSE = dict(num_envs=16, n_steps=64, batch_size=256, n_epochs=4, gamma=0.99, gae_lambda=0.95, learning_rate=1e-3,
              lr_schedule="constant", clip_schedule="constant", normalize_observations=True)
SPARSE_BUDGET = 150_000
SPARSE_ENV = "rlweb-bench/SparseMountainCar-v0"
CURVES_PATH = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "rnd-vs-ppo.png"


class SparseReward(gym.Wrapper):
    """MountainCar with reward 1 for reaching the flag and 0 otherwise: nothing to learn from until a random
    walk gets there, which it practically never does within the 200-step limit."""

    def step(self, action):
        observation, _, terminated, truncated, info = self.env.step(action)
        return observation, float(terminated), terminated, truncated, info


def sparse_mountain_car(**kwargs) -> gym.Env:
    return SparseReward(gym.make("MountainCar-v0", **kwargs))


if SPARSE_ENV not in gym.registry:
    gym.register(SPARSE_ENV, entry_point=sparse_mountain_car)


class Curve(Sink):
    """Keeps the eval curve; with a threshold, stops at the first eval that reaches it."""

    def __init__(self, threshold: float | None = None):
        self.threshold = threshold
        self.evals: list[tuple[int, float]] = []
        self.solved_at: int | None = None

    def emit(self, event: dict) -> None:
        if event["kind"] == "eval":
            score = event["values"]["eval/return_mean"]
            self.evals.append((event["step"], score))
            if self.threshold is not None and score >= self.threshold and self.solved_at is None:
                self.solved_at = event["step"]

    def should_stop(self) -> bool:
        return self.solved_at is not None


def steps_to_threshold(algorithm: str, env_id: str, seed: int, budget: int, eval_interval: int, threshold: float,
                       settings: dict) -> tuple[int | None, float, float]:
    """(env steps at the first eval reaching the threshold or None, best eval, wall seconds)."""
    curve = Curve(threshold)
    started = time.perf_counter()
    trainer.make(algorithm, env_id, seed=seed, **settings).learn(budget, sink=curve, eval_interval=eval_interval,
                                                                 eval_episodes=10)
    best = max(score for _, score in curve.evals) if curve.evals else float("nan")
    return curve.solved_at, best, time.perf_counter() - started


def report_threshold(title: str, results: dict[str, list]) -> None:
    print(title)
    for name, runs in results.items():
        solved = [steps for steps, _, _ in runs if steps is not None]
        cells = ", ".join(f"{steps}" if steps is not None else f"not solved (best {best:.1f})"
                          for steps, best, _ in runs)
        median = f"median {statistics.median(solved):.0f}" if len(solved) == len(runs) else \
            f"{len(solved)}/{len(runs)} solved"
        print(f"  {name:>10}: {cells}  ({median}; {sum(s for _, _, s in runs):.0f} s)", flush=True)


def cartpole(seeds=SEEDS) -> None:
    results = {}
    for algorithm, run in CARTPOLE_RUNS.items():
        results[algorithm] = []
        for seed in seeds:
            results[algorithm].append(steps_to_threshold(algorithm, "CartPole-v1", seed, run["budget"],
                                                         run["eval_interval"], CARTPOLE_SOLVED, run["settings"]))
            steps, best, seconds = results[algorithm][-1]
            print(f"  {algorithm} seed {seed}: {steps if steps else 'not solved'} (best {best:.1f}, {seconds:.0f} s)",
                  flush=True)
    report_threshold(f"CartPole-v1: env steps to a mean eval return >= {CARTPOLE_SOLVED:.0f}", results)


def pendulum(seeds=SEEDS) -> None:
    runs = []
    for seed in seeds:
        runs.append(steps_to_threshold("ppo", "Pendulum-v1", seed, PENDULUM_BUDGET, 10_000, PENDULUM_SOLVED, PENDULUM))
        print(f"  ppo seed {seed}: {runs[-1][0] or 'not solved'} (best {runs[-1][1]:.1f}, {runs[-1][2]:.0f} s)",
              flush=True)
    report_threshold(f"Pendulum-v1: env steps to a mean eval return >= {PENDULUM_SOLVED:.0f} ({PENDULUM})",
                     {"ppo": runs})


def sparse(seeds=SEEDS, curves_path: Path = CURVES_PATH) -> None:
    print(f"{SPARSE_ENV} (reward 1 at the flag, else 0): eval return (success rate) every "
          f"{SPARSE_BUDGET // 10} env steps, same PPO settings {SPARSE}")
    curves: dict[str, list[list[tuple[int, float]]]] = {}
    for algorithm in ("rnd-ppo", "ppo"):
        curves[algorithm] = []
        for seed in seeds:
            curve = Curve()
            trainer.make(algorithm, SPARSE_ENV, seed=seed, **SPARSE).learn(
                SPARSE_BUDGET, sink=curve, eval_interval=SPARSE_BUDGET // 10, eval_episodes=10)
            curves[algorithm].append(curve.evals)
            points = " ".join(f"{score:.1f}" for _, score in curve.evals)
            print(f"  {algorithm:>8} seed {seed}: {points}", flush=True)
    print("  final eval success rate: " + ", ".join(
        f"{a} {np.mean([evals[-1][1] for evals in runs]):.2f}" for a, runs in curves.items()))
    write_curves(curves, curves_path)
    print(f"  curves: {curves_path}")


def write_curves(curves: dict[str, list[list[tuple[int, float]]]], path: Path) -> None:
    """The eval curves of every seed drawn by plotly in Chromium (Debian's, as the browser tests use), saved
    as a PNG; the page itself (plotly.js inlined) goes beside it in /tmp when no browser is there."""
    import tempfile

    import plotly.graph_objects as go

    colours = {"rnd-ppo": "#1f77b4", "ppo": "#d62728"}
    figure = go.Figure()
    for algorithm, runs in curves.items():
        for seed, evals in enumerate(runs):
            steps, scores = zip(*evals) if evals else ((), ())
            figure.add_trace(go.Scatter(x=steps, y=scores, mode="lines+markers", name=f"{algorithm} seed {seed}",
                                        line={"color": colours.get(algorithm)}, legendgroup=algorithm))
    figure.update_layout(title=f"{SPARSE_ENV}: eval success rate (10 episodes), same PPO settings",
                         xaxis_title="env steps", yaxis_title="success rate", yaxis_range=[-0.05, 1.05],
                         width=900, height=500, margin={"l": 60, "r": 20, "t": 60, "b": 50})
    try:
        save_png(figure, path, width=900, height=500)
    except Exception as error:  # noqa: BLE001 - no browser here: the HTML page still has the curves
        page = Path(tempfile.mkdtemp(prefix="rlweb-curves-")) / "rnd-vs-ppo.html"
        figure.write_html(page, include_plotlyjs=True, full_html=True)
        print(f"  (no PNG: {error}; the curves are in {page})")


# --- speed against stable-baselines3 ----------------------------------------------------------------------------

def linear(value: float):
    return lambda remaining: remaining * value  # SB3 schedules get the remaining fraction, 1 -> 0


def sb3_model(algorithm: str, seed: int):
    from stable_baselines3 import A2C, PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    if algorithm == "ppo":  # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1 (our PPO defaults)
        return PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                   ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu")
    return A2C("MlpPolicy", env, seed=seed, device="cpu")  # zoo a2c.yml: 8 envs, SB3 defaults (ours too)


def timed_sb3(algorithm: str, seed: int, total_steps: int, threads: int) -> tuple[float, float]:
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(threads)
    model = sb3_model(algorithm, seed)
    started = time.perf_counter()
    model.learn(total_steps)
    rate = total_steps / (time.perf_counter() - started)
    env = gym.make("CartPole-v1")
    env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, env, n_eval_episodes=10, deterministic=True)
    return rate, float(mean)


def timed_ours(algorithm: str, seed: int, total_steps: int) -> tuple[float, float]:
    torch.set_num_threads(1)
    agent = trainer.make(algorithm, "CartPole-v1", seed=seed)
    started = time.perf_counter()
    agent.learn(total_steps, eval_episodes=0)
    rate = total_steps / (time.perf_counter() - started)
    return rate, agent.evaluate(10, seed=10_000 + seed)["mean"]


def speed(seeds=SEEDS, budgets=(("ppo", 100_000), ("a2c", 200_000)), sb3_default_threads: bool = True) -> None:
    default_threads = DEFAULT_THREADS
    for algorithm, total_steps in budgets:
        print(f"{algorithm.upper()} on CartPole-v1, zoo settings, 8 envs, {total_steps} env steps, interleaved runs "
              f"(rlweb 1 thread; sb3 with 1{f' and with {default_threads}' if sb3_default_threads else ''} threads)")
        rates: dict[str, list[float]] = {"rlweb": [], "sb3 1 thread": []}
        if sb3_default_threads:
            rates[f"sb3 {default_threads} threads"] = []
        returns: dict[str, list[float]] = {name: [] for name in rates}
        for seed in seeds:
            for name in rates:
                if name == "rlweb":
                    rate, score = timed_ours(algorithm, seed, total_steps)
                else:
                    rate, score = timed_sb3(algorithm, seed, total_steps, 1 if "1 thread" in name else default_threads)
                rates[name].append(rate)
                returns[name].append(score)
                print(f"  seed {seed} {name:>14}: {rate:8.1f} env steps/s, eval return {score:6.1f}", flush=True)
        ours = statistics.median(rates["rlweb"])
        for name in list(rates)[1:]:
            print(f"  rlweb / {name}: {ours / statistics.median(rates[name]):.2f}x steps/s (medians), eval return "
                  f"{np.mean(returns['rlweb']):.1f} vs {np.mean(returns[name]):.1f}")
    torch.set_num_threads(default_threads)


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    parts = {"--cartpole": cartpole, "--pendulum": pendulum, "--sparse": sparse, "--speed": speed}
    if "--sb3-one-thread" in options:  # skip SB3 at torch's default thread count (slow on a busy machine)
        parts["--speed"] = lambda: speed(sb3_default_threads=False)
    chosen = [parts[o] for o in options if o in parts] or list(parts.values())
    for part in chosen:
        part()


if __name__ == "__main__":
    main(sys.argv[1:])
