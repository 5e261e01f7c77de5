"""The presets on real workloads: each run with its preset alone (no --set), as a user gets it.

    python -m benchmarks presets --lunarlander            # ppo: env steps to 200 on LunarLander-v3, 1M steps
    python -m benchmarks presets --mujoco                 # sac and td3 on HalfCheetah-v5, 100k steps, vs SB3
    python -m benchmarks presets --lunarlander --seeds 2 --budget 1000000 --eval-every 50000
    python -m benchmarks presets --atari-replay           # dqn and rainbow Pong presets with a 1M-transition replay

--lunarlander: ppo with its RL Zoo preset on LunarLander-v3; every `--eval-every` env steps an
evaluation of 10 episodes; the env steps at which the mean first reaches 200 (the task's "solved"), per
seed, and the final mean. --mujoco: sac and td3 with their RL Zoo HalfCheetah presets for `--mujoco-steps`
env steps, next to stable-baselines3 with the same settings (the zoo's entry, SB3's defaults under it),
one seed each, the two sides one after the other: the mean return of 10 evaluation episodes at the end.
--atari-replay: the dqn preset for ALE/Pong-v5 with `buffer_size` 1,000,000 (and rainbow's with its own 200k:
its prioritized replay adds about 1 ms per transition, so 1M would take 20 min to fill), the replay their agent
builds filled with real Pong transitions (a short rollout's frames, cycled): the memory the form estimates
before queuing, the bytes the buffer's arrays hold, and the growth of the process's resident memory.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import trainer
from trainer import presets
from trainer.events import ListSink


def first_step_at(events: list[dict], threshold: float) -> int | None:
    for event in events:
        if event["kind"] == "eval" and event["values"].get("eval/return_mean", -1e9) >= threshold:
            return event["step"]
    return None


def lunarlander(seeds: int, budget: int, eval_every: int) -> None:
    preset = presets.find("ppo", "LunarLander-v3")
    print(f"ppo on LunarLander-v3 with {preset.description} ({preset.source}), {budget:,} env steps, evaluation "
          f"of 10 episodes every {eval_every:,}")
    reached, finals = [], []
    for seed in range(seeds):
        sink, started = ListSink(), time.perf_counter()
        summary = trainer.make("ppo", "LunarLander-v3", seed=seed, preset="auto").learn(
            budget, sink=sink, eval_interval=eval_every, eval_episodes=10)
        step = first_step_at(sink.events, 200.0)
        reached.append(step)
        finals.append(summary["eval_return_mean"])
        print(f"  seed {seed}: 200 reached at {f'{step:,}' if step else 'never'} env steps; final "
              f"{summary['eval_return_mean']:.1f}; {time.perf_counter() - started:.0f} s", flush=True)
    print(f"  solved on {sum(step is not None for step in reached)} of {seeds} seeds; median final "
          f"{statistics.median(finals):.1f}")


def sb3_mujoco(algorithm: str, steps: int, seed: int) -> float:
    """SB3 with the zoo's HalfCheetah entry (learning_starts 10000; TD3 with Gaussian noise 0.1)."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make("HalfCheetah-v5")
    if algorithm == "sac":
        model = SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, device="cpu")
    else:
        noise = NormalActionNoise(np.zeros(env.action_space.shape), 0.1 * np.ones(env.action_space.shape))
        model = TD3("MlpPolicy", env, learning_starts=10_000, action_noise=noise, seed=seed, device="cpu")
    model.learn(steps)
    mean, _ = evaluate_policy(model, gym.make("HalfCheetah-v5"), n_eval_episodes=10, deterministic=True)
    return float(mean)


def mujoco(steps: int, seed: int, algorithms: list[str], ours: bool, sb3: bool) -> None:
    print(f"HalfCheetah-v5, {steps:,} env steps, seed {seed}, the presets alone; mean return of 10 episodes")
    for algorithm in algorithms:
        preset = presets.find(algorithm, "HalfCheetah-v5")
        line = f"  {algorithm} ({preset.description}):"
        if ours:
            started = time.perf_counter()
            mine = trainer.make(algorithm, "HalfCheetah-v5", seed=seed, preset="auto").learn(
                steps, eval_episodes=10)["eval_return_mean"]
            line += f" rlweb {mine:.0f} in {time.perf_counter() - started:.0f} s"
        if sb3:
            started = time.perf_counter()
            theirs = sb3_mujoco(algorithm, steps, seed)
            line += f"{';' if ours else ''} stable-baselines3 {theirs:.0f} in {time.perf_counter() - started:.0f} s"
        print(line, flush=True)


def atari_replay(capacity: int) -> None:
    import gymnasium as gym
    import numpy as np
    import psutil

    from trainer.envs import make_env
    from trainer.registry import check_memory, get_spec

    env_id, process = "ALE/Pong-v5", psutil.Process()
    print(f"{env_id}: the dqn preset with buffer_size {capacity:,} and rainbow's own, filled with real Pong frames")
    for algorithm, settings in (("dqn", {"buffer_size": capacity}), ("rainbow", {})):
        agent = trainer.make(algorithm, env_id, seed=0, preset="auto", **settings)
        estimate = check_memory(get_spec(algorithm), agent.config, agent.observation_space, agent.action_space, env_id)
        envs = gym.vector.SyncVectorEnv([lambda: make_env(env_id, training=True)])  # as a run steps them
        observations, _ = envs.reset(seed=0)
        rollout = []  # 1,000 real transitions, added again and again
        for _ in range(1_000):
            actions = envs.action_space.sample()
            next_observations, rewards, terminated, truncated, _ = envs.step(actions)
            rollout.append((observations, actions, rewards, next_observations, terminated, truncated))
            observations = next_observations
        envs.close()
        resident = process.memory_info().rss
        buffer = agent.make_buffer()
        started = time.perf_counter()
        for step in range(buffer.capacity):
            buffer.add(*rollout[step % len(rollout)])
        filled = time.perf_counter() - started
        grown = process.memory_info().rss - resident
        parts = [buffer, getattr(buffer, "tree", None)]  # prioritized replay: its sum tree too
        arrays = sum(value.nbytes for part in parts if part is not None
                     for value in vars(part).values() if isinstance(value, np.ndarray))
        batch = buffer.sample(32, np.random.default_rng(0))
        print(f"  {algorithm} ({agent.config.buffer_size:,} transitions, {type(buffer).__name__}): estimated "
              f"{estimate.data_bytes / 1e9:.2f} GB before queuing, arrays {arrays / 1e9:.2f} GB "
              f"({arrays / buffer.size:.0f} bytes per transition), resident memory grew {grown / 1e9:.2f} GB; "
              f"filled in {filled:.0f} s; a batch of {len(batch.actions)} samples", flush=True)
        del buffer, agent


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks presets")
    parser.add_argument("--lunarlander", action="store_true")
    parser.add_argument("--mujoco", action="store_true")
    parser.add_argument("--atari-replay", action="store_true")
    parser.add_argument("--replay-size", type=int, default=1_000_000, help="--atari-replay's buffer_size")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="--mujoco's seed")
    parser.add_argument("--budget", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=50_000)
    parser.add_argument("--mujoco-steps", type=int, default=100_000)
    parser.add_argument("--algorithms", nargs="+", default=["sac", "td3"], choices=("sac", "td3"))
    parser.add_argument("--side", default="both", choices=("both", "rlweb", "sb3"),
                        help="--mujoco: rlweb, stable-baselines3, or both (one after the other)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if not (args.lunarlander or args.mujoco or args.atari_replay):
        args.lunarlander = args.mujoco = True
    if args.lunarlander:
        lunarlander(args.seeds, args.budget, args.eval_every)
    if args.mujoco:
        mujoco(args.mujoco_steps, args.seed, args.algorithms, args.side != "sb3", args.side != "rlweb")
    if args.atari_replay:
        atari_replay(args.replay_size)
