"""What pruning saves in a hyperparameter sweep (trainer/sweep.py, Optuna), with and without it.

    python -m benchmarks sweep                                  # 20 trials of dqn on Acrobot-v1, 2 at once
    python -m benchmarks sweep --trials 8 --steps 20000         # smaller
    python -m benchmarks sweep --pruners median,median:10000,hyperband   # several pruners against none

The same search both times: dqn on Acrobot-v1 from its preset, over the learning rate (log scale), the batch
size, the target update interval and the exploration fraction; TPE with the same seed; each trial
`--steps` env steps with 10 evaluations of 5 episodes, its value the mean of its last 3. First without a
pruner, then with each of `--pruners` (the median pruner by default). It prints, for each: the env steps all
trials used, the wall time, the best value and how many trials were complete, pruned or failed; then what
pruning saved.
"""

from __future__ import annotations

import argparse
import time

from trainer import sweep

SPACE = ["learning_rate=1e-5:1e-2:log", "batch_size=32|64|128", "target_update_interval=100:2000",
         "exploration_fraction=0.05:0.5"]


def run(args, pruner: str) -> dict:
    import trainer

    name, _, warmup = pruner.partition(":")  # median:5000 is the median pruner with 5,000 warm-up steps
    config = sweep.SweepConfig(
        "dqn", "Acrobot-v1", [sweep.parse_dimension("dqn", text) for text in SPACE], total_steps=args.steps,
        eval_interval=args.steps // 10, eval_episodes=5, objective="last-3", trials=args.trials, jobs=args.jobs,
        seed=args.seed, sampler="tpe", pruner=name, warmup_steps=int(warmup) if warmup else None,
        preset=trainer.presets.resolve("dqn", "Acrobot-v1", "auto").name, study_name=f"acrobot-{name}")
    started = time.perf_counter()
    study = sweep.sweep(config)
    seconds = time.perf_counter() - started
    states = [trial.state.name for trial in study.trials]
    result = {"pruner": pruner, "seconds": seconds, "best": study.best_value, "best_params": study.best_params,
              "steps": sum(trial.user_attrs.get("steps", 0) for trial in study.trials),
              **{state.lower(): states.count(state) for state in ("COMPLETE", "PRUNED", "FAIL")}}
    print(f"pruner {pruner}: {result['steps']:,} env steps, {seconds:.0f} s, best {result['best']:.1f} "
          f"({result['complete']} complete, {result['pruned']} pruned, {result['fail']} failed); best settings "
          f"{result['best_params']}", flush=True)
    return result


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks sweep")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per trial")
    parser.add_argument("--jobs", type=int, default=2, help="trials at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pruners", default="median", help="compared with none, comma-separated: median, "
                        "hyperband, or median:STEPS (its warm-up; by default a third of --steps)")
    args = parser.parse_args(argv)
    print(f"dqn on Acrobot-v1, {args.trials} trials of {args.steps:,} steps, {args.jobs} at once, TPE seed "
          f"{args.seed}; search: {' '.join(SPACE)}", flush=True)
    plain = run(args, "none")
    for pruner in args.pruners.split(","):
        pruned = run(args, pruner)
        print(f"{pruner} used {pruned['steps'] / plain['steps']:.0%} of the steps ({1 - pruned['steps'] / plain['steps']:.0%} "
              f"saved) and {pruned['seconds'] / plain['seconds']:.0%} of the time; best value {pruned['best']:.1f} with "
              f"it, {plain['best']:.1f} without", flush=True)
