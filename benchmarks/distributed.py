"""One run on several processes (trainer/distributed.py): how much faster PPO trains with 2 processes than with 1.

    python -m benchmarks distributed                                   # ppo, LunarLander-v3, zoo preset, 1 and 2
    python -m benchmarks distributed --set batch_size=1024             # fewer, bigger minibatches
    python -m benchmarks distributed --env HalfCheetah-v5 --steps 20480 --repeats 2
    python -m benchmarks distributed --learning                        # also: steps to solve CartPole, 3 seeds
    python -m benchmarks distributed --lunarlander --seeds 2           # only: ppo on 2 processes to 200 on
                                                                       # LunarLander-v3 in 1M steps (presets.py's)

Env steps per second of PPO (learning included) with each process count, in interleaved repeats (medians): over
the training itself (the runner's clock: the processes launched, agents built), and over the whole call
(launch, start checkpoint, hand-back included). For the one-process run, the share of its time in the updates
(the rest is stepping the envs and acting); then the time one all-reduce of the PPO gradient takes between two
processes, which every minibatch of a run on two pays. The load average is printed with every measurement: on a
shared machine, other work takes cores the processes need at the same moment, and every all-reduce waits for the
slowest process to be scheduled.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def training_speed(env_id: str, processes: int, steps: int, settings: dict) -> dict:
    """PPO with the preset for `env_id` and `settings` on top: env steps/s over its training and over the call."""
    import torch

    import trainer

    torch.set_num_threads(1)
    agent = trainer.make("ppo", env_id, seed=0, device="cpu", preset="auto", processes=processes, **settings)
    update_seconds = [0.0]
    if processes == 1:  # the share of the updates (a one-process run only: the others train in their processes)
        update = agent.update

        def timed_update(*args, **kwargs):
            started = time.perf_counter()
            try:
                return update(*args, **kwargs)
            finally:
                update_seconds[0] += time.perf_counter() - started

        agent.update = timed_update
    before = load()
    started = time.perf_counter()
    summary = agent.learn(steps, eval_episodes=0)
    wall = time.perf_counter() - started
    return {"training": summary["steps"] / summary["seconds"], "wall": summary["steps"] / wall,
            "overhead": wall - summary["seconds"],
            "update_share": update_seconds[0] / summary["seconds"] if processes == 1 else None,
            "load": f"{before} -> {load()}"}


def all_reduce_seconds(size: int, repeats: int) -> list[float]:
    """In each of two processes: the median seconds of one all-reduce of `size` floats (gloo)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        tensor = torch.zeros(size)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - started)
        return statistics.median(times[repeats // 10:])
    finally:
        dist.destroy_process_group()


def steps_to_solve(processes: int, seed: int, budget: int = 100_000) -> int | None:
    import trainer
    from trainer.events import Sink

    class Solved(Sink):
        best = float("-inf")

        def emit(self, event):
            if event["kind"] == "eval":
                self.best = max(self.best, event["values"]["eval/return_mean"])

        def should_stop(self):
            return self.best >= 475.0

    sink = Solved()
    summary = trainer.make("ppo", "CartPole-v1", seed=seed, device="cpu", processes=processes).learn(
        budget, sink=sink, eval_interval=5_000, eval_episodes=10)
    return summary["steps"] if sink.best >= 475.0 else None


def lunarlander(processes: int, seeds: int, budget: int = 1_000_000, eval_every: int = 50_000) -> None:
    """`python -m benchmarks presets --lunarlander` (ppo, the zoo preset, 1M steps, 10 evaluation episodes every
    50k) on `processes` processes: the env steps at which the evaluation first reaches 200."""
    import trainer
    from benchmarks.presets import first_step_at
    from trainer.events import ListSink

    print(f"ppo on LunarLander-v3 on {processes} processes, zoo preset, {budget:,} env steps, 10 evaluation "
          f"episodes every {eval_every:,}")
    for seed in range(seeds):
        sink, started = ListSink(), time.perf_counter()
        agent = trainer.make("ppo", "LunarLander-v3", seed=seed, device="cpu", preset="auto", processes=processes)
        summary = agent.learn(budget, sink=sink, eval_interval=eval_every, eval_episodes=10)
        step = first_step_at(sink.events, 200.0)
        print(f"  seed {seed}: 200 reached at {f'{step:,}' if step else 'never'} env steps; final "
              f"{summary['eval_return_mean']:.1f}; {time.perf_counter() - started:.0f} s (load {load()})",
              flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks distributed")
    parser.add_argument("--env", default="LunarLander-v3")
    parser.add_argument("--steps", type=int, default=32_768,
                        help="env steps per run (the zoo preset: 16,384 a rollout)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a hyperparameter of ppo")
    parser.add_argument("--learning", action="store_true", help="also env steps to solve CartPole-v1, 3 seeds")
    parser.add_argument("--lunarlander", action="store_true",
                        help="only ppo on the last of --processes to 200 on LunarLander-v3 (1M steps a seed)")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    if args.lunarlander:
        lunarlander(args.processes[-1], args.seeds)
        return

    import trainer
    from trainer.distributed import Hosts, Launch

    config = trainer.make("ppo", args.env, preset="auto", device="cpu", **settings).config
    print(f"ppo on {args.env}: the zoo preset{' with ' + ', '.join(args.set) if args.set else ''} ({config.num_envs} "
          f"envs, n_steps {config.n_steps}, batch {config.batch_size}, {config.n_epochs} epochs), {args.steps:,} env "
          f"steps a run, {args.repeats} interleaved repeats; {os.cpu_count()} CPUs, load average {load()} (1/5/15 min)")
    results: dict[int, list[dict]] = {processes: [] for processes in args.processes}
    for repeat in range(args.repeats):
        for processes in args.processes:
            result = training_speed(args.env, processes, args.steps, settings)
            results[processes].append(result)
            share = f", {result['update_share']:.0%} of it in updates" if result["update_share"] is not None else ""
            print(f"  repeat {repeat + 1}, {processes} process{'es' if processes > 1 else ''}: "
                  f"{result['training']:,.0f} env steps/s training, {result['wall']:,.0f} over the call "
                  f"({result['overhead']:.1f} s more){share} (load {result['load']})", flush=True)
    base = statistics.median(result["training"] for result in results[args.processes[0]])
    for processes, runs in results.items():
        training = statistics.median(result["training"] for result in runs)
        wall = statistics.median(result["wall"] for result in runs)
        overhead = statistics.median(result["overhead"] for result in runs)
        print(f"{processes} process{'es' if processes > 1 else '  '}: {training:>8,.0f} env steps/s training "
              f"({training / base:.2f}x), {wall:>8,.0f} over the call (launch and hand-back: {overhead:.1f} s)")
    size = sum(p.numel() for p in trainer.make("ppo", args.env, preset="auto", device="cpu", **settings)
               .network.parameters())
    with tempfile.TemporaryDirectory() as folder:
        seconds = Launch(all_reduce_seconds, (size, 2_000), 2, Hosts(), Path(folder)).results()
    print(f"one all-reduce of the gradient ({size:,} floats) between 2 processes: "
          f"{statistics.median(seconds.values()) * 1e6:,.0f} us (load {load()})")
    if args.learning:
        for processes in args.processes:
            solved = [steps_to_solve(processes, seed) for seed in range(3)]
            print(f"CartPole-v1, {processes} process(es), zoo preset: solved (eval >= 475) after {solved} env steps")
