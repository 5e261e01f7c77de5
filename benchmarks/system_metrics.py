"""What the system metrics cost a run (trainer/system_metrics.py), on CartPole DQN at its defaults. The issue's
bound: under 1% of env steps per second.

1. Their parts, timed directly: one sample (psutil reads /proc; NVML where there are GPUs), and the work the time
   split adds to every env step (a timer around the envs' step and three clock reads in the runner). With a run's
   own speed (env steps per CPU second, sampling off) they give the share of its time they take.
2. Training with sampling on and off in turns: one DQN agent trains `learn()` after `learn()` of 1024 env steps
   each, in rounds of three: sampling on, off, and off again (the order rotates each round), in env steps per
   CPU second (one torch thread: CPU time is the run's own work, less disturbed by other processes than wall-clock
   time on a shared machine); the quartiles of the per-round ratios on / off, and off again / off for the noise
   of the machine alone. Each `learn()` makes a runner and a
   fresh replay buffer, so the agent learns from its start (learning_starts 0: four training phases of 128 updates
   in each turn, as in a run past its start), and each turn pays a run's own costs (the sampler made, a last
   sample): more than a run pays. Short turns put both sides under the same load from the machine's other work.

The direct figure is also given at the speed of the steps before learning starts (acting and env steps only),
where the time split weighs most.

    python -m benchmarks system_metrics                     # 40 rounds of 1024 env steps (about 4 minutes)
    python -m benchmarks system_metrics --rounds=80 --steps=2048
"""

from __future__ import annotations

import os
import statistics
import time

import torch

import trainer
from trainer import system_metrics
from trainer.events import Sink


class SampleCount(Sink):
    def __init__(self):
        self.samples = 0

    def emit(self, event: dict) -> None:
        self.samples += "system/rss_mb" in event["values"]


def per_sample_seconds(samples: int = 200) -> float:
    sampler = system_metrics.SystemSampler(interval=5)
    started = time.process_time()
    for _ in range(samples):
        sampler.sample()
    return (time.process_time() - started) / samples


def per_step_seconds(steps: int = 200_000) -> float:
    """What the time split adds to one env step of a DQN loop: the envs' step through its timer, and the runner's
    laps in `advance` (two) and `record` (one, an update every step at most), less the bare call."""
    def bare(actions):
        return actions

    phases = system_metrics.PhaseTimes()
    timed = phases.timed_step(bare)
    started = time.process_time()
    for _ in range(steps):
        timed(None)
        phases.lap(system_metrics.ENV)
        phases.lap(system_metrics.OTHER)
        phases.lap(system_metrics.UPDATE)
    instrumented = time.process_time() - started
    started = time.process_time()
    for _ in range(steps):
        bare(None)
    return (instrumented - (time.process_time() - started)) / steps


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    rounds = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--rounds=")), 40)
    steps = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--steps=")), 1024)
    saved = os.environ.get(system_metrics.INTERVAL_VARIABLE)
    interval = system_metrics.INTERVAL_SECONDS
    try:
        os.environ[system_metrics.INTERVAL_VARIABLE] = "0"
        agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", learning_starts=0)
        warming = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu")  # its buffer never reaches 1,000
        agent.learn(steps, eval_episodes=0)  # warm up
        sample, step = per_sample_seconds(), per_step_seconds()
        for label, learner in (("training", agent), ("before learning starts", warming)):
            speed = statistics.median([steps / cpu_seconds(learner, steps) for _ in range(3)])
            share = step * speed + sample / interval
            print(f"{label}: {speed:.0f} env steps per CPU second; one sample {sample * 1e6:.0f} us of CPU every "
                  f"{interval:g} s ({100 * sample / interval:.4f}%), the time split {step * 1e9:.0f} ns per env step "
                  f"({100 * step * speed:.3f}%): {100 * share:.3f}% of the time", flush=True)
        # a third turn with sampling off too: off / off shows what the machine's noise alone gives
        rates = {"on": [], "off": [], "control": []}
        samples = SampleCount()
        for round_ in range(rounds):
            names = ("on", "off", "control")[round_ % 3:] + ("on", "off", "control")[:round_ % 3]
            for name in names:
                os.environ[system_metrics.INTERVAL_VARIABLE] = str(interval if name == "on" else 0)
                rates[name].append(steps / cpu_seconds(agent, steps, samples))
        print(f"{rounds} rounds of {steps} env steps with sampling on, off and off again, in turns ({samples.samples} "
              f"samples): median on {statistics.median(rates['on']):.0f}, off {statistics.median(rates['off']):.0f} "
              f"env steps per CPU second", flush=True)
        for label, side in (("on / off", "on"), ("off again / off (noise)", "control")):
            quartiles = statistics.quantiles(sorted(a / b for a, b in zip(rates[side], rates["off"])), n=4)
            print(f"  {label}: quartiles of the per-round ratios {quartiles[0]:.3f}, {quartiles[1]:.3f}, "
                  f"{quartiles[2]:.3f} (median {100 * (quartiles[1] - 1):+.2f}%)", flush=True)
    finally:
        if saved is None:
            os.environ.pop(system_metrics.INTERVAL_VARIABLE, None)
        else:
            os.environ[system_metrics.INTERVAL_VARIABLE] = saved


def cpu_seconds(agent, steps: int, sink: Sink | None = None) -> float:
    started = time.process_time()
    agent.learn(steps, sink=sink, eval_episodes=0)
    return time.process_time() - started
