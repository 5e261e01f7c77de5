"""Command line: `python -m trainer list | train | eval`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import trainer
from trainer.events import JsonLinesSink, MultiSink, ProgressBarSink


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="rlweb's RL trainer")
    commands = parser.add_subparsers(dest="command", required=True)

    list_parser = commands.add_parser("list", help="print the algorithm names, one per line")
    list_parser.add_argument("--params", metavar="ALGO", help="print that algorithm's hyperparameters instead")

    train = commands.add_parser("train", help="train an agent and write DIR/final.zip")
    train.add_argument("algorithm")
    train.add_argument("env_id")
    train.add_argument("--total-steps", type=int, required=True)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", type=Path, required=True, help="folder for checkpoints and events.jsonl")
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--eval-interval", type=int, default=0, help="env steps between evaluations (0: only at the end)")
    train.add_argument("--eval-episodes", type=int, default=10)
    train.add_argument("--checkpoint-interval", type=int, default=0, help="env steps between checkpoints (0: final only)")
    train.add_argument("--video-interval", type=int, default=0,
                       help="env steps between recorded episodes, written as DIR/video_step_N.mp4 (0: none)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a hyperparameter")
    train.add_argument("--threads", type=int, default=1, help="torch CPU threads")

    evaluate = commands.add_parser("eval", help="evaluate a checkpoint; prints one JSON line")
    evaluate.add_argument("checkpoint", type=Path)
    evaluate.add_argument("--episodes", type=int, default=10)
    evaluate.add_argument("--seed", type=int, default=None)
    evaluate.add_argument("--device", default="auto")

    args = parser.parse_args(argv)
    try:
        return {"list": _list, "train": _train, "eval": _eval}[args.command](args)
    except trainer.ConfigError as error:
        for field, message in error.errors.items():
            print(f"error: {field}: {message}", file=sys.stderr)
        return 2
    except (trainer.CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _list(args) -> int:
    if args.params:
        for p in trainer.get_spec(args.params).params():
            bounds = f" [{p.low if p.low is not None else ''}..{p.high if p.high is not None else ''}]"
            print(f"{p.name} ({p.type.__name__}, default {p.default}){bounds if p.low or p.high else ''}: {p.help}")
        return 0
    for name in trainer.algorithm_names():
        print(name)
    return 0


def _train(args) -> int:
    import torch

    torch.set_num_threads(max(1, args.threads))
    if args.total_steps < 1:
        raise ValueError("--total-steps must be at least 1")
    if args.video_interval < 0:
        raise ValueError("--video-interval must be 0 or more")
    hyperparameters = {}
    for item in args.set:
        key, separator, value = item.partition("=")
        if not separator:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        hyperparameters[key.strip()] = value
    agent = trainer.make(args.algorithm, args.env_id, seed=args.seed, device=args.device, **hyperparameters)
    args.out.mkdir(parents=True, exist_ok=True)
    sink = MultiSink(ProgressBarSink(args.total_steps), JsonLinesSink(args.out / "events.jsonl"))
    try:
        summary = agent.learn(args.total_steps, sink=sink, eval_interval=args.eval_interval,
                              eval_episodes=args.eval_episodes, checkpoint_interval=args.checkpoint_interval,
                              checkpoint_dir=args.out, video_interval=args.video_interval)
    finally:
        sink.close()
    print(json.dumps(summary))
    return 0


def _eval(args) -> int:
    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1")
    agent = trainer.load(args.checkpoint, device=args.device)
    result = agent.evaluate(args.episodes, seed=args.seed)
    print(json.dumps({"mean": result["mean"], "std": result["std"], "episodes": args.episodes,
                      "returns": result["returns"]}))
    return 0
