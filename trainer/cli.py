"""Command line: `python -m trainer list | train | eval | presets | sweep`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import trainer
from trainer import provenance
from trainer.distributed import Hosts
from trainer.events import JsonLinesSink, MultiSink, ProgressBarSink
from trainer.params import interval_errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="rlweb's RL trainer")
    commands = parser.add_subparsers(dest="command", required=True)

    list_parser = commands.add_parser("list", help="print the algorithms, one per line, each with the package (and "
                                                         "version) it comes from; broken plugins last, with their error")
    list_parser.add_argument("--params", metavar="ALGO", help="print that algorithm's hyperparameters instead")

    train = commands.add_parser("train", help="train an agent and write DIR/final.zip",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=hyperparameters_help(argv if argv is not None else sys.argv[1:]))
    train.add_argument("algorithm")
    train.add_argument("env_id")
    train.add_argument("--total-steps", type=int, required=True)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", type=Path, required=True, help="folder for checkpoints and events.jsonl")
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--eval-interval", type=int, default=0, help="env steps between evaluations (0: only at the end)")
    train.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation (0: no evaluation)")
    train.add_argument("--checkpoint-interval", type=int, default=0, help="env steps between checkpoints (0: final only)")
    train.add_argument("--video-interval", type=int, default=0,
                       help="env steps between recorded episodes, written as DIR/video_step_N.mp4 (0: none)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a hyperparameter, on top of the preset")
    train.add_argument("--preset", default="auto",
                       help="auto (the settings tuned for this environment, where there are some), none (the "
                            "algorithm's defaults), or a name from `presets ALGO`")
    train.add_argument("--threads", type=int, default=1, help="torch CPU threads (of a run on one process)")
    train.add_argument("--processes", type=int, default=None,
                       help="train on this many processes (the `processes` hyperparameter; docs/distributed.md)")
    train.add_argument("--nodes", type=int, default=1,
                       help="hosts that train the run together, each running this same command (default 1)")
    train.add_argument("--rdzv-endpoint", default="", metavar="HOST:PORT",
                       help="with --nodes: where the hosts meet (a free port on one of them, reachable from all)")
    train.add_argument("--rdzv-id", default="", help="with --nodes: the run's name at the endpoint, the same on all")

    presets = commands.add_parser("presets", help="list an algorithm's presets, or the one an environment gets")
    presets.add_argument("algorithm")
    presets.add_argument("env_id", nargs="?")

    evaluate = commands.add_parser("eval", help="evaluate a checkpoint; prints one JSON line")
    evaluate.add_argument("checkpoint", type=Path)
    evaluate.add_argument("--episodes", type=int, default=10)
    evaluate.add_argument("--seed", type=int, default=None)
    evaluate.add_argument("--device", default="auto")

    sweep = commands.add_parser("sweep", help="search hyperparameters with Optuna; prints every trial and the best",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="--param NAME=LOW:HIGH (a range), NAME=LOW:HIGH:log (on a log scale), "
                                       "'NAME=A|B|C' (choices, quoted in a shell) or NAME=VALUE (fixed); `list --params ALGO` names them")
    sweep.add_argument("algorithm")
    sweep.add_argument("env_id")
    sweep.add_argument("--param", action="append", default=[], metavar="NAME=SPACE", help="a hyperparameter to search")
    sweep.add_argument("--total-steps", type=int, required=True, help="env steps per trial (per seed)")
    sweep.add_argument("--eval-interval", type=int, default=None,
                       help="env steps between the evaluations (default: a tenth of --total-steps; pbt: "
                            "--ready-interval, of which it must be a divisor)")
    sweep.add_argument("--eval-episodes", type=int, default=5)
    sweep.add_argument("--objective", default="final",
                       help="final, best, last-N (the mean of the last N evaluations) or threshold (the fewest env "
                            "steps until an evaluation returns --threshold)")
    sweep.add_argument("--threshold", type=float, default=None, help="the return to reach, for --objective threshold")
    sweep.add_argument("--trials", type=int, default=20)
    sweep.add_argument("--jobs", type=int, default=1, help="trials at once, each in a process of its own")
    sweep.add_argument("--seeds", type=int, default=1, help="runs per trial; its value is their mean")
    sweep.add_argument("--seed", type=int, default=0, help="the sampler's seed, and the runs' first")
    sweep.add_argument("--sampler", default="tpe", choices=["tpe", "random", "grid"])
    sweep.add_argument("--pruner", default="median", choices=["none", "median", "hyperband"])
    sweep.add_argument("--startup-trials", type=int, default=None,
                       help="median pruner: finished trials before it prunes (default: a quarter of --trials, 1 to 5)")
    sweep.add_argument("--warmup-steps", type=int, default=None,
                       help="median pruner: no trial is pruned before this step (default: a third of --total-steps)")
    sweep.add_argument("--device", default="cpu", help="auto, cpu or cuda")
    sweep.add_argument("--preset", default="auto", help="as for train: the settings the search starts from")
    sweep.add_argument("--storage", help="an Optuna storage URL (e.g. sqlite:///sweep.db) to keep or extend the study; "
                                         "default: a journal file in a temporary folder")
    sweep.add_argument("--study-name", default="rlweb-sweep")
    sweep.add_argument("--method", default="optuna", choices=["optuna", "pbt"],
                       help="optuna: trials one after another (--trials, --sampler, --pruner); pbt: population-based "
                            "training, a population trained together whose worst members copy the best ones")
    sweep.add_argument("--population", type=int, default=8, help="pbt: members trained together")
    sweep.add_argument("--ready-interval", type=int, default=None,
                       help="pbt: env steps between the points where the worst members copy the best (default: a "
                            "tenth of --total-steps)")
    sweep.add_argument("--quantile", type=float, default=0.25, help="pbt: the share of members that copy, and that are copied")
    sweep.add_argument("--resample-probability", type=float, default=0.25,
                       help="pbt: the chance that a copied value is drawn anew instead of multiplied by 0.8 or 1.2")

    args = parser.parse_args(argv)
    try:
        return {"list": _list, "train": _train, "presets": _presets, "eval": _eval, "sweep": _sweep}[args.command](args)
    except trainer.ConfigError as error:
        for field, message in error.errors.items():
            print(f"error: {field}: {message}", file=sys.stderr)
        return 2
    except (trainer.CheckpointError, OSError, ValueError) as error:  # OSError: a missing file, a folder, no space
        print(f"error: {error}", file=sys.stderr)
        return 2


def param_lines(algorithm: str) -> list[str]:
    """One line per hyperparameter: name, type, default, whether a running run may change it (live), bounds,
    help and its upstream names."""
    lines = []
    for p in trainer.get_spec(algorithm).params():
        bounds = f" [{p.low if p.low is not None else ''}..{p.high if p.high is not None else ''}]"
        live = ", live" if p.live else ""
        lines.append(f"{p.name} ({p.type.__name__}, default {p.default}{live}){bounds if p.low or p.high else ''}: "
                     f"{p.help}" + (f" {p.aliases_text()}" if p.aliases_text() else ""))
    return lines


def hyperparameters_help(argv: list[str]) -> str | None:
    """For `train ALGO --help`: the algorithm's hyperparameters, to pass with --set."""
    if len(argv) < 2 or argv[0] != "train" or not {"-h", "--help"} & set(argv) or \
            argv[1] not in trainer.algorithm_names():
        return None
    return f"hyperparameters of {argv[1]} (--set NAME=VALUE, on top of the preset):\n" + "\n".join(
        f"  {line}" for line in param_lines(argv[1]))


def _list(args) -> int:
    if args.params:
        print("\n".join(param_lines(args.params)))
        return 0
    names = trainer.algorithm_names()
    broken = trainer.broken_algorithms()
    width = max(map(len, names + [algorithm.name for algorithm in broken]))
    for name in names:  # where each comes from: rlweb's own, or the plugin package that declares it
        print(f"{name:<{width}}  {trainer.origin(name)}")
    for algorithm in broken:
        print(f"{algorithm.name:<{width}}  {algorithm.origin}  BROKEN: {algorithm.error}")
    return 0


MAX_STEPS = 10**12  # beyond any run, and far inside int64 step counters
MAX_EPISODES = 10**6


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"--{name} must be from {low:,} to {high:,}, got {value}")


def _train(args) -> int:
    import torch

    _check_range("total-steps", args.total_steps, 1, MAX_STEPS)
    _check_range("seed", args.seed, 0, 2**63 - 1)
    for name in ("eval_interval", "checkpoint_interval", "video_interval"):
        _check_range(name.replace("_", "-"), getattr(args, name), 0, MAX_STEPS)
    errors = interval_errors(args.total_steps, args.checkpoint_interval, args.video_interval)
    if errors:
        raise ValueError("; ".join(f"--{name.replace('_', '-')} {message}" for name, message in errors.items()))
    _check_range("eval-episodes", args.eval_episodes, 0, MAX_EPISODES)  # 0, as the web form allows: none
    _check_range("threads", args.threads, 1, 1024)
    _check_range("nodes", args.nodes, 1, 1024)
    if args.nodes > 1 and not (args.rdzv_endpoint and args.rdzv_id):
        raise ValueError("--nodes needs --rdzv-endpoint HOST:PORT and --rdzv-id NAME, the same on every host")
    torch.set_num_threads(args.threads)
    hyperparameters = {}
    for item in args.set:
        key, separator, value = item.partition("=")
        if not separator:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        hyperparameters[key.strip()] = value
    if args.processes is not None:
        if "processes" in hyperparameters:
            raise ValueError("give the processes once: --processes N or --set processes=N")
        hyperparameters["processes"] = args.processes
    trainer.get_spec(args.algorithm)
    preset = trainer.presets.resolve(args.algorithm, args.env_id, args.preset)
    print(f"preset: {describe(preset)}", file=sys.stderr)
    agent = trainer.make(args.algorithm, args.env_id, seed=args.seed, device=args.device,
                         preset=preset.name if preset else None, **hyperparameters)
    processes = getattr(agent.config, "processes", 1)
    if args.nodes > 1 and processes % args.nodes:
        raise ValueError(f"--nodes {args.nodes} needs processes (all hosts together) to be a multiple of it, got "
                         f"{processes}")
    for note in agent.notes(args.total_steps):
        print(f"note: {note}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    agent.environment = provenance.collect(  # into its checkpoints: what made it, and the command that repeats it
        agent, total_steps=args.total_steps, out=args.out, eval_interval=args.eval_interval,
        eval_episodes=args.eval_episodes, checkpoint_interval=args.checkpoint_interval, video_interval=args.video_interval)
    sink = MultiSink(ProgressBarSink(args.total_steps), JsonLinesSink(args.out / "events.jsonl"))
    try:
        summary = agent.learn(args.total_steps, sink=sink, eval_interval=args.eval_interval,
                              eval_episodes=args.eval_episodes, checkpoint_interval=args.checkpoint_interval,
                              checkpoint_dir=args.out, video_interval=args.video_interval,
                              hosts=Hosts(args.nodes, args.rdzv_endpoint, args.rdzv_id) if args.nodes > 1 else None)
    finally:
        sink.close()
    if args.nodes > 1 and summary.get("final_checkpoint") is None:
        print("note: process 0 ran on another host: the run's events and checkpoints are in its --out folder",
              file=sys.stderr)
    print(json.dumps(summary))
    return 0


def describe(preset) -> str:
    """One line: the preset's name, what it is and where its numbers come from."""
    if preset is None:
        return "none (the algorithm's own defaults)"
    return f"{preset.name}: {preset.description} ({preset.source})"


def _presets(args) -> int:
    spec = trainer.get_spec(args.algorithm)
    chosen = [trainer.presets.find(spec.name, args.env_id)] if args.env_id else trainer.presets.listing(spec.name)
    if chosen == [None]:
        print(f"{spec.name} has no preset for {args.env_id}: it trains with its own defaults")
        return 0
    for preset in chosen:
        print(describe(preset))
        if preset.total_steps:
            print(f"  tuned for {preset.total_steps:,} env steps")
        for name, value in sorted(preset.values.items()):
            print(f"  {name} = {value!r}")
        for key, reason in sorted(preset.no_equivalent.items()):
            print(f"  (no equivalent: {key}: {reason})")
    return 0


def _eval(args) -> int:
    _check_range("episodes", args.episodes, 1, MAX_EPISODES)
    if args.seed is not None:
        _check_range("seed", args.seed, 0, 2**63 - 1)
    agent = trainer.load(args.checkpoint, device=args.device)
    result = agent.evaluate(args.episodes, seed=args.seed)
    print(json.dumps({"mean": result["mean"], "std": result["std"], "episodes": args.episodes,
                      "returns": result["returns"]}))
    return 0


def _search_space(args):
    """The checked --param dimensions and the resolved preset, shared by `sweep` and `sweep --method pbt`."""
    from trainer import sweep

    trainer.get_spec(args.algorithm)
    if not args.param:
        raise ValueError("give at least one --param to search")
    dimensions = [sweep.parse_dimension(args.algorithm, text) for text in args.param]
    preset = trainer.presets.resolve(args.algorithm, args.env_id, args.preset)
    print(f"preset: {describe(preset)}", file=sys.stderr)
    return dimensions, preset


def _sweep(args) -> int:
    from trainer import sweep

    _check_range("total-steps", args.total_steps, 1, MAX_STEPS)
    if args.method == "pbt":
        return _pbt(args)
    if args.eval_interval is None:
        args.eval_interval = max(1, args.total_steps // 10)
    _check_range("eval-interval", args.eval_interval, 1, args.total_steps)
    _check_range("eval-episodes", args.eval_episodes, 1, MAX_EPISODES)
    _check_range("trials", args.trials, 1, 100_000)
    _check_range("jobs", args.jobs, 1, 1024)
    _check_range("seeds", args.seeds, 1, 1000)
    if args.startup_trials is None:
        args.startup_trials = sweep.default_startup_trials(args.trials)
    _check_range("startup-trials", args.startup_trials, 0, args.trials)
    if args.objective == "threshold" and args.threshold is None:
        raise ValueError("--objective threshold needs --threshold, the return to reach")
    if args.warmup_steps is not None:
        _check_range("warmup-steps", args.warmup_steps, 0, args.total_steps)
    dimensions, preset = _search_space(args)
    config = sweep.SweepConfig(
        args.algorithm, args.env_id, dimensions, total_steps=args.total_steps, eval_interval=args.eval_interval,
        eval_episodes=args.eval_episodes, objective=sweep.check_objective(args.objective), trials=args.trials,
        jobs=args.jobs, seeds=args.seeds, seed=args.seed, sampler=args.sampler, pruner=args.pruner,
        startup_trials=args.startup_trials, warmup_steps=args.warmup_steps, threshold=args.threshold,
        device=args.device, preset=preset.name if preset else None, storage=args.storage, study_name=args.study_name)
    study = sweep.sweep(config)
    print("\n".join(sweep.report(study)))
    return 0 if any(trial.state.name == "COMPLETE" for trial in study.trials) else 1


def _pbt(args) -> int:
    """`sweep --method pbt`: the members trained in turn in this process (trainer/pbt.py)."""
    from trainer import pbt, sweep

    _check_range("population", args.population, 2, 1024)
    if args.ready_interval is None:
        args.ready_interval = max(1, args.total_steps // 10)
    _check_range("ready-interval", args.ready_interval, 1, args.total_steps)
    if args.eval_interval is None:
        args.eval_interval = args.ready_interval
    _check_range("eval-interval", args.eval_interval, 1, args.ready_interval)
    _check_range("eval-episodes", args.eval_episodes, 1, MAX_EPISODES)
    dimensions, preset = _search_space(args)
    config = pbt.PbtConfig(
        args.algorithm, args.env_id, dimensions, total_steps=args.total_steps, ready_interval=args.ready_interval,
        population=args.population, eval_interval=args.eval_interval,
        eval_episodes=args.eval_episodes, objective=sweep.check_objective(args.objective), quantile=args.quantile,
        resample_probability=args.resample_probability, seed=args.seed, device=args.device,
        preset=preset.name if preset else None)
    members, copies = pbt.population_based_training(config, log=lambda line: print(line, file=sys.stderr))
    print("\n".join(pbt.report(members, copies, config.objective)))
    return 0
