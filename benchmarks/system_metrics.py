"""What the system metrics cost a run (trainer/system_metrics.py): CartPole DQN at its defaults, whole runs with
sampling on and off, interleaved (on, off, off, on, ...: the order alternates each round), speeds in env steps per
CPU second (one torch thread: CPU time is the run's own work, less disturbed by other processes than wall-clock
time on a shared machine), and the median of the per-round ratios on / off. The issue's bound: under 1%.

Two pairs: as runs train (a sample every 5 s, the env-step timer on every step), and a stress pair with a `time`
event every 0.2 s in both and a sample at every one of them (25 times as many samples), which bounds the cost of
the sampling itself.

    python -m benchmarks system_metrics                     # 6 rounds of 12k env steps (about 5 minutes)
    python -m benchmarks system_metrics --rounds=4 --steps=6000
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


PAIRS = {"as runs train (sample every 5 s)": ((5.0, 2.0), (0, 2.0)),
         "stress (time event and sample every 0.2 s)": ((0.2, 0.2), (0, 0.2))}


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    rounds = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--rounds=")), 6)
    steps = next((int(o.split("=", 1)[1]) for o in options if o.startswith("--steps=")), 12_000)
    saved = os.environ.get(system_metrics.INTERVAL_VARIABLE), runner_module.TIME_EVENT_SECONDS
    try:
        cpu_rate(steps // 4, 0, 2.0)  # warm up (imports, allocator, caches): the first timed run pays nothing more
        for label, (on, off) in PAIRS.items():
            rates = {"on": [], "off": []}
            samples = []
            for round_ in range(rounds):
                for name in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
                    rate, count = cpu_rate(steps, *(on if name == "on" else off))
                    rates[name].append(rate)
                    if name == "on":
                        samples.append(count)
                print(f"{label} round {round_}: on {rates['on'][-1]:.0f}, off {rates['off'][-1]:.0f} env steps per "
                      f"CPU second; {samples[-1]} samples", flush=True)
            ratios = [a / b for a, b in zip(rates["on"], rates["off"])]
            print(f"{label}, {steps} env steps, {rounds} interleaved rounds: median on {statistics.median(rates['on']):.0f}, "
                  f"off {statistics.median(rates['off']):.0f} env steps per CPU second; on / off per round "
                  f"{', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f} "
                  f"({100 * (1 - statistics.median(ratios)):+.2f}% slower with sampling)", flush=True)
    finally:
        if saved[0] is None:
            os.environ.pop(system_metrics.INTERVAL_VARIABLE, None)
        else:
            os.environ[system_metrics.INTERVAL_VARIABLE] = saved[0]
        runner_module.TIME_EVENT_SECONDS = saved[1]
