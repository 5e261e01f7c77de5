"""When `vectorization=async` pays: env steps per second of sync and async vector envs, interleaved.

    python -m benchmarks vector_envs                        # 8 envs; CartPole, LunarLander, HalfCheetah, Pong
    python -m benchmarks vector_envs --envs 4 --seconds 5 --repeats 3 --ids CartPole-v1 ALE/Pong-v5
    python -m benchmarks vector_envs --train                # also PPO on LunarLander-v3, learning included

Random actions, `--envs` envs stepped together, `--seconds` of stepping per measurement after a warm-up
(building the envs is timed apart: async spawns a process per env). Sync and async alternate, `--repeats`
times; the medians and their ratio are printed. On a machine with few cores async gains only where one
env step costs more than passing its observation between processes (Atari, MuJoCo, Box2D), and loses
on cheap envs (CartPole).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

DEFAULT_IDS = ["CartPole-v1", "LunarLander-v3", "HalfCheetah-v5", "ALE/Pong-v5"]


def steps_per_second(env_id: str, num_envs: int, vectorization: str, seconds: float) -> tuple[float, float]:
    """(env steps per second, seconds to build the envs)."""
    from trainer.envs import make_vector_env

    started = time.perf_counter()
    envs = make_vector_env(env_id, num_envs, seed=0, vectorization=vectorization)
    built = time.perf_counter() - started
    try:
        envs.reset(seed=0)
        for _ in range(20):  # warm-up
            envs.step(envs.action_space.sample())
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            envs.step(envs.action_space.sample())
            steps += num_envs
        return steps / (time.perf_counter() - started), built
    finally:
        envs.close()


def training_speed(env_id: str, vectorization: str, total_steps: int, num_envs: int) -> float:
    """PPO's env steps per second on `env_id`, learning included (the zoo's preset, `num_envs` envs)."""
    import torch
    import trainer

    torch.set_num_threads(1)
    agent = trainer.make("ppo", env_id, seed=0, preset="auto", vectorization=vectorization, num_envs=num_envs)
    started = time.perf_counter()
    agent.learn(total_steps, eval_episodes=0)
    return total_steps / (time.perf_counter() - started)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks vector_envs")
    parser.add_argument("--ids", nargs="+", default=DEFAULT_IDS)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train", action="store_true", help="also PPO on LunarLander-v3, sync against async")
    parser.add_argument("--train-steps", type=int, default=20_000)
    args = parser.parse_args(argv)
    import os

    print(f"{args.envs} envs, random actions, {args.seconds:.0f} s per measurement, {args.repeats} interleaved "
          f"repeats; {os.cpu_count()} CPUs")
    print(f"{'env':<16} {'sync steps/s':>13} {'async steps/s':>14} {'async/sync':>11} {'build sync':>11} "
          f"{'build async':>12}")
    for env_id in args.ids:
        results = {"sync": [], "async": []}
        built = {"sync": [], "async": []}
        for _ in range(args.repeats):
            for vectorization in ("sync", "async"):
                speed, seconds = steps_per_second(env_id, args.envs, vectorization, args.seconds)
                results[vectorization].append(speed)
                built[vectorization].append(seconds)
        sync, asynchronous = (statistics.median(results[name]) for name in ("sync", "async"))
        print(f"{env_id:<16} {sync:>13,.0f} {asynchronous:>14,.0f} {asynchronous / sync:>10.2f}x "
              f"{statistics.median(built['sync']):>10.1f}s {statistics.median(built['async']):>11.1f}s", flush=True)
    if args.train:
        speeds = {name: [] for name in ("sync", "async")}
        for _ in range(args.repeats):
            for vectorization in speeds:
                speeds[vectorization].append(training_speed("LunarLander-v3", vectorization, args.train_steps,
                                                            args.envs))
        sync, asynchronous = (float(np.median(speeds[name])) for name in ("sync", "async"))
        print(f"PPO on LunarLander-v3 (zoo preset, {args.envs} envs, {args.train_steps:,} steps, learning included): "
              f"sync {sync:,.0f}, async {asynchronous:,.0f} env steps/s: {asynchronous / sync:.2f}x")
