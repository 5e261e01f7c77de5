"""What pruning saves in a hyperparameter sweep (trainer/sweep.py, Optuna), with and without it.

    python -m benchmarks sweep                                  # 20 trials of dqn on Acrobot-v1, 2 at once
    python -m benchmarks sweep --trials 8 --steps 20000         # smaller
    python -m benchmarks sweep --pruners median,median:10000,hyperband   # several pruners against none

The same search both times: dqn on Acrobot-v1 from its preset, over the learning rate (log scale), the batch
size, the target update interval and the exploration fraction; TPE (or `--sampler random`) with the same seed; each trial
`--steps` env steps with 10 evaluations of 5 episodes, its value the mean of its last 3. First without a
pruner, then with each of `--pruners` (the median pruner by default). It prints, for each: the env steps all
trials used, the wall time, the best value and how many trials were complete, pruned or failed; then what
pruning saved.

    python -m benchmarks sweep --steps 100000 --baseline FOLDER   # the no-pruning sweep recorded in FOLDER
    python -m benchmarks sweep --steps 100000 --baseline FOLDER --replay   # pruning rules replayed on it

`--baseline` takes the folder of an earlier run's no-pruning sweep (its `study.journal`, printed as it starts)
instead of running it again. `--replay` runs nothing: it replays median-pruning rules on the recorded curves,
each trial compared with the trials finished before it started (with --jobs 2, all but the one before it), and
prints the steps each rule saves and the best value it keeps; TPE's answer to pruning is not replayed.
"""

from __future__ import annotations

import argparse
import statistics
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
        seed=args.seed, sampler=args.sampler, pruner=name, warmup_steps=int(warmup) if warmup else None,
        preset=trainer.presets.resolve("dqn", "Acrobot-v1", "auto").name, study_name=f"acrobot-{name}")
    print(f"pruner {pruner}: the study is in {config.folder}", flush=True)
    started = time.perf_counter()
    study = sweep.sweep(config)
    seconds = time.perf_counter() - started
    return summary(study, pruner, seconds)


def recorded(folder: str):
    """The no-pruning study an earlier run recorded in `folder`."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(f"{folder}/study.journal"))
    return optuna.load_study(study_name="acrobot-none", storage=storage)


def summary(study, pruner: str, seconds: float | None = None) -> dict:
    if seconds is None:  # a recorded study: from its first trial's start to its last trial's end
        seconds = (max(trial.datetime_complete for trial in study.trials)
                   - min(trial.datetime_start for trial in study.trials)).total_seconds()
    states = [trial.state.name for trial in study.trials]
    result = {"pruner": pruner, "seconds": seconds, "best": study.best_value, "best_params": study.best_params,
              "steps": sum(trial.user_attrs.get("steps", 0) for trial in study.trials),
              **{state.lower(): states.count(state) for state in ("COMPLETE", "PRUNED", "FAIL")}}
    print(f"pruner {pruner}: {result['steps']:,} env steps, {seconds:.0f} s, best {result['best']:.1f} "
          f"({result['complete']} complete, {result['pruned']} pruned, {result['fail']} failed); best settings "
          f"{result['best_params']}", flush=True)
    return result


def replay(study, steps: int, jobs: int) -> None:
    """Median-pruning rules replayed on a recorded no-pruning study (see the module's docstring)."""
    trials = [trial for trial in study.trials if trial.state.name == "COMPLETE"]
    best = max(trial.value for trial in trials)
    print(f"replayed on {len(trials)} recorded trials (best {best:.1f}); 5 startup trials", flush=True)
    for rule in ("Optuna's median", "median, and ties at the floor"):
        for warmup in (10_000, 20_000, 30_000, steps // 3, 40_000):
            used, kept, pruned = 0, [], 0
            for index, trial in enumerate(trials):
                finished, stop = trials[:max(0, index - (jobs - 1))], None  # not those still running beside it
                for step in sorted(trial.intermediate_values) if len(finished) >= 5 else ():
                    if step < warmup:
                        continue
                    others = [other.intermediate_values[step] for other in finished if step in other.intermediate_values]
                    so_far = max(value for at, value in trial.intermediate_values.items() if at <= step)
                    if so_far < statistics.median(others) or (rule != "Optuna's median"
                                                              and sweep.at_the_floor(so_far, others)):
                        stop = step
                        break
                used += steps if stop is None else stop
                pruned += stop is not None
                kept += [trial.value] if stop is None else []
            print(f"  {rule}, warm-up {warmup:,}: {1 - used / (steps * len(trials)):.1%} of the steps saved, {pruned} "
                  f"pruned, best kept {max(kept):.1f}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks sweep")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per trial")
    parser.add_argument("--jobs", type=int, default=2, help="trials at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sampler", default="tpe", choices=["tpe", "random"],
                        help="random: both sweeps draw the same 20 settings (each process its own seeded sequence), "
                             "so pruning does not change what is tried; with TPE it does. (A trial's training seed "
                             "follows its number, which depends on which trial ends first.)")
    parser.add_argument("--pruners", default="median", help="compared with none, comma-separated: median, "
                        "hyperband, or median:STEPS (its warm-up; by default a third of --steps)")
    parser.add_argument("--baseline", metavar="FOLDER", help="the no-pruning sweep an earlier run recorded there")
    parser.add_argument("--replay", action="store_true", help="replay pruning rules on --baseline; train nothing")
    args = parser.parse_args(argv)
    if args.replay and not args.baseline:
        parser.error("--replay needs --baseline FOLDER")
    print(f"dqn on Acrobot-v1, {args.trials} trials of {args.steps:,} steps, {args.jobs} at once, {args.sampler} "
          f"sampler, seed {args.seed}; search: {' '.join(SPACE)}", flush=True)
    if args.replay:
        return replay(recorded(args.baseline), args.steps, args.jobs)
    plain = summary(recorded(args.baseline), "none (recorded)") if args.baseline else run(args, "none")
    for pruner in args.pruners.split(","):
        pruned = run(args, pruner)
        print(f"{pruner} used {pruned['steps'] / plain['steps']:.0%} of the steps ({1 - pruned['steps'] / plain['steps']:.0%} "
              f"saved) and {pruned['seconds'] / plain['seconds']:.0%} of the time; best value {pruned['best']:.1f} with "
              f"it, {plain['best']:.1f} without", flush=True)
