"""Atari speed against stable-baselines3, learning included: PPO and DQN on ALE/Pong-v5, interleaved.

    python -m benchmarks atari_speed                      # PPO and DQN on the CPU, 3 interleaved pairs each
    python -m benchmarks atari_speed --algorithms ppo --pairs 4 --ppo-steps 8192 --device cpu
    python -m benchmarks atari_speed --profile            # also where our PPO's time goes (py-spy, 2 runs)
    python -m benchmarks atari_speed --bare --algorithms  # only 8 envs stepped bare: ale-py, our wrappers, SB3

Both sides train with the same settings on the same game with the same preprocessing:

- PPO: RL Zoo's Atari settings (8 envs, 128 steps, 4 epochs of minibatches of 256, lr and clip annealed), ours
  from the `atari` preset (envs stepped by ale-py's vector env: vectorization auto), SB3's PPO on its
  `make_atari_env` (AtariWrapper, one env after the other in a DummyVecEnv) with a 4-frame stack;
- DQN: our `atari` preset (RL Zoo's: Nature CNN, batch 32, one update per 4 env steps) against SB3's DQN with the
  same values (benchmarks/dqn.py), learning from `--dqn-learning-starts` so that updates are part of the time.

Each run is a process of its own (nothing warm is shared), and the two sides alternate: ours, SB3, ours, SB3...
on a busy machine the ratio of medians is the figure, with every pair's ratio printed beside it. Torch gets one
thread on both sides (the envs' threads are what ale-py adds: one per core, at most one per env).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ATARI_ID = "ALE/Pong-v5"


def ppo_run(side: str, seed: int, steps: int, device: str = "cpu", threads: int = 1,
            precision: str = "float32") -> tuple[float, float]:
    """Env steps per second of wall time and of this process's CPU time (all its threads) of one PPO run, learning
    included."""
    import torch

    torch.set_num_threads(threads)
    if side == "rlweb":
        import trainer
    else:
        import stable_baselines3  # noqa: F401  (imports are not timed; building the envs and model is, both sides)
    wall, cpu = time.perf_counter(), time.process_time()
    if side == "rlweb":  # our envs are built inside learn(): ale-py's take about 0.4 s of CPU each
        trainer.make("ppo", ATARI_ID, seed=seed, device=device, preset="auto", precision=precision).learn(
            steps, eval_episodes=0)
    else:
        sb3_ppo_model(seed, device).learn(steps)
    return steps / (time.perf_counter() - wall), steps / (time.process_time() - cpu)


def sb3_ppo_model(seed: int, device: str):
    """SB3's PPO with RL Zoo's Atari settings (rl_zoo3 hyperparams/ppo.yml: atari) on its AtariWrapper."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    env = VecFrameStack(make_atari_env(ATARI_ID, n_envs=8, seed=seed, env_kwargs=dict(frameskip=1)), n_stack=4)
    return PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=lambda left: 2.5e-4 * left,
               clip_range=lambda left: 0.1 * left, vf_coef=0.5, ent_coef=0.01, seed=seed, device=device, verbose=0)


def dqn_run(side: str, seed: int, steps: int, learning_starts: int, device: str = "cpu") -> tuple[float, float]:
    from benchmarks.dqn import atari_run

    return atari_run(side, seed, steps, learning_starts, device)


def bare_env_rate(kind: str, num_envs: int = 8, seconds: float = 5.0) -> tuple[float, float]:
    """Env steps per second (wall, and per CPU second of the process) of `num_envs` Pong envs with random actions,
    no learning: ours through ale-py (`ale`) or our Gymnasium wrappers (`sync`), or SB3's AtariWrapper envs in its
    DummyVecEnv with a 4-frame stack (`sb3`)."""
    import numpy as np

    if kind == "sb3":
        import ale_py
        import gymnasium as gym
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gym.register_envs(ale_py)
        envs = VecFrameStack(make_atari_env(ATARI_ID, n_envs=num_envs, seed=0, env_kwargs=dict(frameskip=1)), 4)
        envs.reset()
        step = envs.step
    else:
        from trainer.envs import make_vector_env

        envs = make_vector_env(ATARI_ID, num_envs, seed=0, vectorization=kind)
        step = envs.step
    rng, steps = np.random.default_rng(0), 0
    for _ in range(20):
        step(rng.integers(0, 6, num_envs))
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        step(rng.integers(0, 6, num_envs))
        steps += num_envs
    rates = steps / (time.perf_counter() - wall), steps / (time.process_time() - cpu)
    envs.close()
    return rates


def ppo_network_ms(rounds: int = 5) -> dict[str, float]:
    """CPU milliseconds per env step of the network passes PPO with RL Zoo's Atari settings cannot skip, one torch
    thread, our ActorCritic (the Nature CNN, its policy and value heads): one forward at acting (8 envs at a time) and,
    per rollout of 1,024, 4 epochs of forward and backward in minibatches of 256 (medians over `rounds`)."""
    import numpy as np
    import torch

    import trainer

    torch.set_num_threads(1)
    agent = trainer.make("ppo", ATARI_ID, seed=0, device="cpu", preset="auto")
    network = agent.network
    images = torch.as_tensor(np.random.default_rng(0).integers(0, 255, (256, 4, 84, 84), dtype=np.uint8))
    actions = torch.zeros(256, dtype=torch.int64)
    acting, training = [], []
    for _ in range(rounds):
        started = time.process_time()
        with torch.no_grad():
            for k in range(0, 256, 8):
                network(images[k:k + 8])
        acting.append((time.process_time() - started) / 256)
        started = time.process_time()
        distribution, values = network(images)
        (distribution.log_prob(actions).mean() + values.mean()).backward()
        training.append((time.process_time() - started) / 256 * 4)  # 4 epochs over every sample
    return {"acting_ms": 1e3 * statistics.median(acting), "update_ms": 1e3 * statistics.median(training)}


def in_own_process(function, *args):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def interleaved(run, pairs: int, *args) -> dict:
    """`pairs` runs of each side, alternating, each in a fresh process: their speeds (per second of wall time, and
    of CPU time), medians and ratios."""
    speeds: dict[str, list[float]] = {"rlweb": [], "sb3": []}
    cpu: dict[str, list[float]] = {"rlweb": [], "sb3": []}
    for pair in range(pairs):
        for side in ("rlweb", "sb3") if pair % 2 == 0 else ("sb3", "rlweb"):  # neither side always goes first
            wall_rate, cpu_rate = in_own_process(run, side, pair, *args)
            speeds[side].append(wall_rate)
            cpu[side].append(cpu_rate)
            print(f"  {side:<6} pair {pair}: {wall_rate:,.0f} env steps/s ({cpu_rate:,.0f} per CPU second)", flush=True)
    ratios = [ours / theirs for ours, theirs in zip(speeds["rlweb"], speeds["sb3"])]
    return {"rlweb": speeds["rlweb"], "sb3": speeds["sb3"], "pair_ratios": ratios,
            "ratio": statistics.median(speeds["rlweb"]) / statistics.median(speeds["sb3"]),
            "rlweb_per_cpu_second": cpu["rlweb"], "sb3_per_cpu_second": cpu["sb3"],
            "cpu_ratio": statistics.median(cpu["rlweb"]) / statistics.median(cpu["sb3"])}


def compare(algorithms, pairs: int, device: str, ppo_steps: int, dqn_steps: int, dqn_learning_starts: int,
            precision: str = "float32") -> dict:
    results = {}
    if "ppo" in algorithms:
        print(f"PPO on {ATARI_ID}, RL Zoo's Atari settings (8 envs), {ppo_steps:,} env steps, learning included, "
              f"on {device}, ours in {precision}; {pairs} interleaved pairs, {os.cpu_count()} CPUs", flush=True)
        results["ppo"] = interleaved(ppo_run, pairs, ppo_steps, device, 1, precision)
    if "dqn" in algorithms:
        print(f"DQN on {ATARI_ID}, our atari preset on both sides, {dqn_steps:,} env steps learning from "
              f"{dqn_learning_starts:,}, on {device}; {pairs} interleaved pairs", flush=True)
        results["dqn"] = interleaved(dqn_run, pairs, dqn_steps, dqn_learning_starts, device)
    for name, result in results.items():
        print(f"== {name} rlweb / sb3 on {device}: {result['ratio']:.2f}x (medians {statistics.median(result['rlweb']):,.0f}"
              f" / {statistics.median(result['sb3']):,.0f} env steps/s; pairs "
              f"{', '.join(f'{r:.2f}' for r in result['pair_ratios'])}); per CPU second {result['cpu_ratio']:.2f}x",
              flush=True)
    return results


def profile(side: str, steps: int, device: str, out: Path, rate: int = 50) -> str:
    """py-spy's flat profile of one PPO run of `side` (subprocesses and native frames included): the top lines."""
    code = (f"from benchmarks.atari_speed import ppo_run; print(ppo_run({side!r}, 0, {steps}, {device!r}))")
    raw = out / f"profile-{side}.txt"
    command = ["py-spy", "record", "--format", "raw", "--native", "--subprocesses", "--rate", str(rate), "-o",
               str(raw), "--", sys.executable, "-c", code]
    subprocess.run(command, check=True, capture_output=True, timeout=900)
    return summarize_profile(raw)


def summarize_profile(raw: Path, rows: int = 18) -> str:
    """Self time and inclusive time per function from py-spy's raw (collapsed-stack) output, as percentages."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples, frames = int(count), stack.split(";")
        total += samples
        own[frames[-1]] = own.get(frames[-1], 0) + samples
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + samples
    lines = [f"{total} samples; self time:"]
    lines += [f"  {100 * n / total:5.1f}%  {name[:110]}" for name, n in sorted(own.items(), key=lambda kv: -kv[1])[:rows]]
    lines.append("inclusive time (selected):")
    keys = ("collect", "update", "minibatch_loss", "backward", "step (trainer/envs.py", "step (gymnasium",
            "rollout_actions", "_flat_tensors", "learn (stable_baselines3", "collect_rollouts", "train (stable",
            "step_wait", "forward")
    for name, n in sorted(inclusive.items(), key=lambda kv: -kv[1]):
        if any(key in name for key in keys):
            lines.append(f"  {100 * n / total:5.1f}%  {name[:110]}")
    return "\n".join(lines[:60])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks atari_speed")
    parser.add_argument("--algorithms", nargs="*", default=["ppo", "dqn"], choices=["ppo", "dqn"])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ppo-steps", type=int, default=8_192)
    parser.add_argument("--dqn-steps", type=int, default=6_000)
    parser.add_argument("--dqn-learning-starts", type=int, default=1_000)
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"],
                        help="our PPO's image encoder (SB3 stays float32)")
    parser.add_argument("--profile", action="store_true", help="also py-spy profiles of one PPO run of each side")
    parser.add_argument("--bare", action="store_true", help="also 8 envs stepped with random actions, no learning: "
                                                            "ale-py's vector env, our wrappers, SB3's")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    results = {}
    if args.bare:
        print("8 Pong envs, random actions, no learning: env steps/s (per CPU second), interleaved", flush=True)
        rates: dict[str, list] = {"ale": [], "sync": [], "sb3": []}
        for _ in range(args.pairs):
            for kind in rates:
                rates[kind].append(in_own_process(bare_env_rate, kind))
        for kind, values in rates.items():
            print(f"  {kind:<5} {statistics.median(v[0] for v in values):8,.0f} "
                  f"({statistics.median(v[1] for v in values):,.0f} per CPU second)", flush=True)
        results["bare"] = rates
        network = in_own_process(ppo_network_ms)
        ale_ms = 1e3 / statistics.median(v[1] for v in rates["ale"])
        sb3_ms = 1e3 / statistics.median(v[1] for v in rates["sb3"])
        print(f"PPO's network passes per env step (CPU ms, one thread): acting {network['acting_ms']:.2f}, update "
              f"{network['update_ms']:.2f}; env step: ale-py {ale_ms:.2f}, SB3 {sb3_ms:.2f}. The least CPU time a "
              f"PPO env step can take here: {ale_ms + network['acting_ms'] + network['update_ms']:.2f} ms", flush=True)
        results["network"] = {**network, "ale_env_ms": ale_ms, "sb3_env_ms": sb3_ms}
    results.update(compare(args.algorithms, args.pairs, args.device, args.ppo_steps, args.dqn_steps,
                           args.dqn_learning_starts, args.precision))
    if args.profile:
        with tempfile.TemporaryDirectory() as folder:
            for side in ("rlweb", "sb3"):
                print(f"== where PPO's time goes, {side}:\n{profile(side, args.ppo_steps, args.device, Path(folder))}",
                      flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
