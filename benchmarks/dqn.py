"""DQN family: replay memory, speed against stable-baselines3, env steps each preset needs on CartPole.

    python -m benchmarks dqn                 # everything (about an hour on 2 cores)
    python -m benchmarks dqn --speed         # ours vs SB3, tuned CartPole settings, interleaved
    python -m benchmarks dqn --presets       # env steps to a 475 eval return, each preset, 3 seeds
    python -m benchmarks dqn --presets=c51,rainbow   # only these presets
    python -m benchmarks dqn --memory        # replay bytes per Atari transition
    python -m benchmarks dqn --recurrent     # r2d1 vs feed-forward DQN on CartPole without velocities
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import trainer
from trainer.events import Sink

# rl-baselines3-zoo's tuned CartPole-v1 settings (hyperparams/dqn.yml), our DQN defaults
ZOO_CARTPOLE = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                    target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                    exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))
# per-preset settings for CartPole: returns reach 100 (discounted), so C51's support must cover them
PRESET_OVERRIDES = {"c51": dict(v_min=0.0, v_max=100.0), "rainbow": dict(v_min=0.0, v_max=100.0)}
SOLVED = 475.0


class StopWhenSolved(Sink):
    """Stops a run at the first evaluation whose mean return reaches the threshold."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.solved_at: int | None = None
        self.best = float("-inf")

    def emit(self, event: dict) -> None:
        if event["kind"] != "eval":
            return
        self.best = max(self.best, event["values"]["eval/return_mean"])
        if self.best >= self.threshold and self.solved_at is None:
            self.solved_at = event["step"]

    def should_stop(self) -> bool:
        return self.solved_at is not None


def ours(seed: int, total_steps: int) -> tuple[float, float]:
    agent = trainer.make("dqn", "CartPole-v1", seed=seed)
    started = time.perf_counter()
    agent.learn(total_steps, eval_episodes=0)
    seconds = time.perf_counter() - started
    return total_steps / seconds, agent.evaluate(10, seed=10_000 + seed)["mean"]


def theirs(seed: int, total_steps: int) -> tuple[float, float]:
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.evaluation import evaluate_policy

    model = DQN("MlpPolicy", gym.make("CartPole-v1"), seed=seed, device="cpu", **ZOO_CARTPOLE)
    started = time.perf_counter()
    model.learn(total_steps)
    seconds = time.perf_counter() - started
    env = gym.make("CartPole-v1")
    env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, env, n_eval_episodes=10, deterministic=True)
    return total_steps / seconds, float(mean)


def speed(seeds=(0, 1, 2), total_steps: int = 50_000) -> None:
    print(f"DQN on CartPole-v1, zoo-tuned settings, {total_steps} env steps, torch threads "
          f"{torch.get_num_threads()}, interleaved runs")
    rates = {"rlweb": [], "sb3": []}
    returns = {"rlweb": [], "sb3": []}
    for seed in seeds:
        for name, run in (("rlweb", ours), ("sb3", theirs)):
            rate, score = run(seed, total_steps)
            rates[name].append(rate)
            returns[name].append(score)
            print(f"  seed {seed} {name:>5}: {rate:8.1f} env steps/s, eval return {score:6.1f}", flush=True)
    ratio = statistics.median(rates["rlweb"]) / statistics.median(rates["sb3"])
    print(f"  median steps/s: rlweb {statistics.median(rates['rlweb']):.1f}, sb3 {statistics.median(rates['sb3']):.1f}"
          f" -> ratio {ratio:.2f}x (target >= 2x)")
    print(f"  mean eval return: rlweb {np.mean(returns['rlweb']):.1f}, sb3 {np.mean(returns['sb3']):.1f}")


def steps_to_solve(algorithms, env_id: str, seeds, budget: int, eval_interval: int) -> None:
    """For each algorithm and seed: the env steps at the first eval with mean return >= SOLVED, or the best."""
    print(f"Env steps to a mean eval return >= {SOLVED} on {env_id} (10 episodes every {eval_interval} steps, "
          f"budget {budget})")
    for algorithm in algorithms:
        needed, best = [], []
        for seed in seeds:
            sink = StopWhenSolved(SOLVED)
            started = time.perf_counter()
            trainer.make(algorithm, env_id, seed=seed, **PRESET_OVERRIDES.get(algorithm, {})).learn(
                budget, sink=sink, eval_interval=eval_interval, eval_episodes=10)
            needed.append(sink.solved_at)
            best.append(sink.best)
            print(f"    {algorithm} seed {seed}: {sink.solved_at or f'>{budget}'} steps, best eval {sink.best:.1f}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
        shown = ", ".join(str(n) if n is not None else f">{budget}" for n in needed)
        solved = [n for n in needed if n is not None]
        median = statistics.median(solved) if len(solved) == len(needed) else None
        print(f"  {algorithm:>12}: {shown}  (median {median if median is not None else 'n/a'}; best evals "
              f"{', '.join(f'{b:.0f}' for b in best)})", flush=True)


PRESETS = ("dqn", "double-dqn", "dueling-dqn", "noisy-dqn", "nstep-dqn", "per-dqn", "c51", "rainbow")


def presets(names=PRESETS, seeds=(0, 1, 2), budget: int = 100_000, eval_interval: int = 2_500) -> None:
    steps_to_solve(names, "CartPole-v1", seeds, budget, eval_interval)


def recurrent(seeds=(0, 1, 2), budget: int = 60_000, eval_interval: int = 2_500) -> None:
    """A partially observed task: positions only. A feed-forward DQN cannot infer the velocities."""
    steps_to_solve(("r2d1", "dqn"), "rlweb/CartPoleNoVelocity-v1", seeds, budget, eval_interval)


def memory() -> None:
    from trainer.buffers import FrameStackReplayBuffer, ReplayBuffer

    deduplicated = FrameStackReplayBuffer(1000, (4, 84, 84), np.uint8).bytes_per_transition()
    plain = ReplayBuffer(1000, (4, 84, 84), np.uint8)
    stacked = sum(a.nbytes for a in (plain.obs, plain.next_obs, plain.actions, plain.rewards, plain.terminated,
                                     plain.ended)) / plain.capacity
    print(f"Atari replay, bytes per transition: frame-deduplicated {deduplicated:.0f} "
          f"({deduplicated * 1e6 / 1e9:.2f} GB per million), stacked obs + next_obs {stacked:.0f} "
          f"({stacked * 1e6 / 1e9:.1f} GB per million)")


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    chosen = {o.lstrip("-").split("=")[0] for o in options} or {"memory", "speed", "presets", "recurrent"}
    names = next((o.split("=", 1)[1].split(",") for o in options if o.startswith("--presets=")), PRESETS)
    unknown = sorted(set(names) - set(PRESETS))
    if unknown:
        raise SystemExit(f"unknown preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
    if "memory" in chosen:
        memory()
    if "speed" in chosen:
        speed()
    if "presets" in chosen:
        presets(names)
    if "recurrent" in chosen:
        recurrent()
