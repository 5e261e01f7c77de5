"""What the system metrics cost a run (trainer/system_metrics.py), on CartPole DQN at its defaults. The issue's
bound: under 1% of env steps per second.

1. Their parts, timed directly: one sample (psutil reads /proc; NVML where there are GPUs), and the work the time
   split adds to every env step (a timer around the envs' step and three clock reads in the runner). With a run's
   own speed (env steps per CPU second, sampling off) they give the share of its time they take.
2. Whole runs with sampling on and off, interleaved (on, off, off, on, ...: the order alternates each round), in
   env steps per CPU second (one torch thread: CPU time is the run's own work, less disturbed by other processes
   than wall-clock time on a shared machine), and the median of the per-round ratios on / off. On a busy machine
   two runs of the same code differ by several percent, more than the cost measured: the direct figure is the one
   to read there.

    python -m benchmarks system_metrics                     # 10 rounds of 4k env steps (about 3 minutes)
    python -m benchmarks system_metrics --rounds=20 --steps=8000
"""

from __future__ import annotations

import os
import statistics
import time

import torch

import trainer
from trainer import runner as runner_module
from trainer import system_metrics
from trainer.events import Sink


class SampleCount(Sink):
    def __init__(self):
        self.samples = 0

    def emit(self, event: dict) -> None:
        self.samples += "system/rss_mb" in event["values"]


def cpu_rate(steps: int, sample_seconds: float, time_event_seconds: float) -> tuple[float, int]:
    """Env steps per CPU second of one DQN run, and the samples it sent."""
    os.environ[system_metrics.INTERVAL_VARIABLE] = str(sample_seconds)
    runner_module.TIME_EVENT_SECONDS = time_event_seconds
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu")
    sink = SampleCount()
    started = time.process_time()
    agent.learn(steps, sink=sink, eval_episodes=0)
    return steps / (time.process_time() - started), sink.samples


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
        phases.lap("env")
        phases.lap("other")
        phases.lap("update")
    instrumented = time.process_time() - started
    started = time.process_time()
    for _ in range(steps):
        bare(None)
    return (instrumented - (time.process_time() - started)) / steps


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    rounds = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--rounds=")), 10)
    steps = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--steps=")), 4_000)
    saved = os.environ.get(system_metrics.INTERVAL_VARIABLE), runner_module.TIME_EVENT_SECONDS
    try:
        speed, _ = cpu_rate(steps, 0, 2.0)  # also the warm-up (imports, allocator, caches)
        sample, step = per_sample_seconds(), per_step_seconds()
        interval = system_metrics.INTERVAL_SECONDS
        share = step * speed + sample / interval
        print(f"one sample {sample * 1e6:.0f} us (every {interval:g} s: {100 * sample / interval:.4f}% of the time); "
              f"the time split {step * 1e9:.0f} ns per env step, at {speed:.0f} env steps per CPU second "
              f"{100 * step * speed:.3f}%; together {100 * share:.3f}% of a run's time", flush=True)
        rates = {"on": [], "off": []}
        samples = []
        for round_ in range(rounds):
            for name in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
                rate, count = cpu_rate(steps, interval if name == "on" else 0, 2.0)
                rates[name].append(rate)
                if name == "on":
                    samples.append(count)
            print(f"round {round_}: on {rates['on'][-1]:.0f}, off {rates['off'][-1]:.0f} env steps per CPU second; "
                  f"{samples[-1]} samples", flush=True)
        ratios = sorted(a / b for a, b in zip(rates["on"], rates["off"]))
        print(f"whole runs, {steps} env steps, {rounds} interleaved rounds: median on {statistics.median(rates['on']):.0f}, "
              f"off {statistics.median(rates['off']):.0f} env steps per CPU second; on / off per round from "
              f"{ratios[0]:.3f} to {ratios[-1]:.3f}, median {statistics.median(ratios):.3f} "
              f"({100 * (1 - statistics.median(ratios)):+.2f}% slower with sampling)", flush=True)
    finally:
        if saved[0] is None:
            os.environ.pop(system_metrics.INTERVAL_VARIABLE, None)
        else:
            os.environ[system_metrics.INTERVAL_VARIABLE] = saved[0]
        runner_module.TIME_EVENT_SECONDS = saved[1]
