"""The fast paths, each measured against the plain code it replaces: whole training runs, every path
switched off in turn, interleaved with runs that have them all (A, B, C, A, B, C, ...), speeds as
ratios of CPU time (one torch thread: CPU time is the run's own work, less disturbed by other processes
than wall-clock time on a shared machine). A path stays only where it gains at least 10%
(trainer/update_strategies.py, trainer/cpu_speed.py).

    python -m benchmarks fast_paths                      # everything, 6 rounds (about 10 minutes)
    python -m benchmarks fast_paths --dqn --rounds=8     # DQN's CPU strategy, part by part
    python -m benchmarks fast_paths --acting             # numpy acting of PPO and A2C

DQN: the CPU strategy (hand-written gradients, shared targets, numpy acting) at RL Zoo's CartPole
settings, 6k env steps (5k after learning starts: 2.5k updates). PPO and A2C: numpy acting at their
CartPole defaults, 16k and 20k env steps; PPO's gained 1.07x to 1.12x, so PPO acts through torch (here
the benchmark switches it on to measure it). SAC's and TD3's numpy acting, measured with `--continuous`
at commit 5d9e0d9 (1.03x and 1.01x), was dropped with that option.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import trainer
from trainer import update_strategies


def dqn(switches: dict) -> trainer.Agent:
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu")
    agent.strategy = update_strategies.for_dqn(agent, **switches)
    return agent


def policy_gradient(algorithm: str, numpy_acting: bool) -> trainer.Agent:
    agent = trainer.make(algorithm, "CartPole-v1", seed=0, device="cpu")
    agent.numpy_acting = numpy_acting  # (whichever the algorithm has; read on the first rollout)
    return agent


DQN_OFF = {"all": {}, "no hand gradients": {"hand_gradients": False},
           "no shared targets": {"shared_targets": False}, "no numpy acting": {"numpy_acting": False},
           "none (PlainDQN)": {"hand_gradients": False, "shared_targets": False, "numpy_acting": False}}


def dqn_variants() -> dict:
    return {name: (lambda switches=switches: dqn(switches)) for name, switches in DQN_OFF.items()}


def acting_variants(algorithm: str) -> dict:
    return {"all": lambda: policy_gradient(algorithm, True), "no numpy acting": lambda: policy_gradient(algorithm, False)}


def cpu_rate(make, steps: int) -> float:
    agent = make()
    started = time.process_time()
    agent.learn(steps, eval_episodes=0)
    return steps / (time.process_time() - started)


def compare(label: str, steps: int, variants: dict, rounds: int) -> None:
    rates = {name: [] for name in variants}
    for round_ in range(rounds):
        for name, make in variants.items():
            rates[name].append(cpu_rate(make, steps))
        print(f"{label} round {round_}: " + ", ".join(f"{name} {values[-1]:.0f}" for name, values in rates.items()),
              flush=True)
    print(f"{label}, {steps} env steps, {rounds} interleaved rounds, env steps per CPU second:")
    for name, values in rates.items():
        ratios = [a / b for a, b in zip(rates["all"], values)]
        print(f"  {name:18s} median {statistics.median(values):7.0f}; all / this per round "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}x", flush=True)


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    rounds = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--rounds=")), 6)
    everything = not {"--dqn", "--acting"} & set(options)
    if everything or "--dqn" in options:
        compare("dqn", 6_000, dqn_variants(), rounds)
    if everything or "--acting" in options:
        compare("ppo", 16_000, acting_variants("ppo"), rounds)
        compare("a2c", 20_000, acting_variants("a2c"), rounds)


if __name__ == "__main__":
    main(sys.argv[1:])
