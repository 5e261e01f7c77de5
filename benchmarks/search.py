"""Hyperparameter search for the same compute: random search, TPE, pruned TPE and population-based training (issue 32).

    python -m benchmarks search --task cartpole-dqn --seeds 0,1,2 --out /tmp/search     # every method, 3 sweep seeds
    python -m benchmarks search --task lunarlander-ppo --budget-steps 6000000 --trial-steps 300000 --out DIR
    python -m benchmarks search --task cartpole-dqn --methods random,tpe-hyperband --jobs 2 --out DIR
    python -m benchmarks search --task cartpole-dqn --out DIR --report       # the table of what DIR holds; no training

Every method gets the same budget of env steps (`--budget-steps`, by default 20 trials' worth) on each of the
sweep seeds. The Optuna methods (trainer/sweep.py) run budget / `--trial-steps` trials, `--jobs` at a time:
`random` (random sampler), `tpe`, and `tpe-median` or `tpe-hyperband` (TPE with that pruner, whose pruned trials
stop early and so use less than the budget). `pbt` (trainer/pbt.py, the command line's loop: the members trained
in turn in one process) trains `--population` members of budget / population steps each, the bottom quarter
copying the top quarter every `--ready-interval` steps. The search spaces are in TASKS; every setting in them
can change while a run trains, as PBT needs. Each trial and member starts from the task's preset.

A method's value on a sweep seed is its best trial's (or member's) objective (`--objective`, by default its final
evaluation of `--eval-episodes` episodes). That best is chosen out of many noisy evaluations, so the best settings
(PBT: the best member's whole schedule of settings from step 0, replayed as live changes) are trained again on
`--rerun-seeds` fresh seeds, each evaluated at the end over `--rerun-episodes` episodes.

Progress is printed as it goes, and each sweep, then its re-run, is written to DIR/results.json as soon as it ends:
a run that is cut off keeps what finished, and running the same command again with the same `--out` skips what
results.json holds. The table per task: each method's best (mean ± standard deviation over the sweep seeds), the
re-run's mean, the env steps and wall time (means over the sweep seeds) and, for the TPE methods, the steps they
had used when a trial first matched random search's best on the same seed (counting every trial started up to
that one). Then the issue's two targets, PASS or FAIL: pruned TPE's best at least random search's with at most 60%
of its steps; PBT's best at least TPE's at the same budget.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from trainer import pbt, sweep
from trainer.events import Sink


@dataclass(frozen=True)
class Task:
    algorithm: str
    env_id: str
    space: tuple[str, ...]  # sweep.parse_dimension's NAME=LOW:HIGH[:log]; only live settings (PBT changes them)
    trial_steps: int  # the default env steps of one trial


DQN_SPACE = ("learning_rate=1e-5:1e-2:log", "exploration_final_eps=0.01:0.2", "target_update_interval=10:2000")
TASKS = {
    "cartpole-dqn": Task("dqn", "CartPole-v1", DQN_SPACE, 50_000),
    "lunarlander-ppo": Task("ppo", "LunarLander-v3",
                            ("learning_rate=1e-5:1e-3:log", "entropy_coef=0:0.05", "clip_range=0.1:0.4"), 300_000),
    "acrobot-dqn": Task("dqn", "Acrobot-v1", DQN_SPACE, 50_000),  # the hard case: its best settings learn late
}
METHODS = {"random": ("random", "none"), "tpe": ("tpe", "none"), "tpe-median": ("tpe", "median"),
           "tpe-hyperband": ("tpe", "hyperband"), "pbt": None}  # Optuna's (sampler, pruner); pbt is no Optuna sweep
PRUNED = ("tpe-median", "tpe-hyperband")
STEPS_TARGET = 0.6  # pruned TPE may use at most this share of random search's steps


def preset_of(task: Task) -> str | None:
    import trainer

    preset = trainer.presets.resolve(task.algorithm, task.env_id, "auto")
    return preset.name if preset else None


def dimensions_of(task: Task) -> list:
    return [sweep.parse_dimension(task.algorithm, text) for text in task.space]


# --- the methods ---------------------------------------------------------------------------------------------

def optuna_search(task: Task, method: str, seed: int, settings: dict, folder: Path, jobs: int, device: str,
                  log) -> dict:
    """One Optuna sweep of budget / trial steps trials; its best value and settings, and every trial's steps."""
    sampler, pruner = METHODS[method]
    trial_steps = settings["trial_steps"]
    config = sweep.SweepConfig(
        task.algorithm, task.env_id, dimensions_of(task), total_steps=trial_steps,
        eval_interval=max(1, trial_steps // 10), eval_episodes=settings["eval_episodes"],
        objective=settings["objective"], trials=settings["budget_steps"] // trial_steps, jobs=jobs, seed=seed,
        sampler=sampler, pruner=pruner, warmup_steps=settings["warmup_steps"],
        startup_trials=settings["startup_trials"], device=device, preset=preset_of(task),
        study_name=f"{method}-seed{seed}", folder=folder)
    log(f"{config.trials} trials of {trial_steps:,} steps, {jobs} at once; the study is in {folder}")
    done = threading.Event()
    watcher = threading.Thread(target=watch, args=(config, done, log), daemon=True)
    watcher.start()
    try:
        study = sweep.sweep(config)
    finally:
        done.set()
        watcher.join()
    complete = [trial for trial in study.trials if trial.state.name == "COMPLETE"]
    best = max(complete, key=lambda trial: trial.value) if complete else None
    return {"best": best.value if best else None, "best_params": best.params if best else None,
            "steps": sum(trial.user_attrs.get("steps", 0) for trial in study.trials),
            "trials": [{"number": trial.number, "state": trial.state.name.lower(), "value": trial.value,
                        "steps": trial.user_attrs.get("steps", 0), "params": trial.params} for trial in study.trials]}


def watch(config, done: threading.Event, log, every: float = 60.0) -> None:
    """Every `every` seconds while the sweep runs: how many trials ended, and the best so far."""
    import optuna

    while not done.wait(every):
        try:
            study = optuna.load_study(study_name=config.study_name, storage=sweep.storage_of(config))
            trials = study.get_trials(deepcopy=False)
        except Exception:  # the journal is being written: the next look will do
            continue
        ended = [trial for trial in trials if trial.state.is_finished()]
        values = [trial.value for trial in ended if trial.state.name == "COMPLETE"]
        best = f", best so far {max(values):.2f}" if values else ""
        log(f"{len(ended)} of {config.trials} trials ended ({sum(t.state.name == 'PRUNED' for t in ended)} pruned)"
            f"{best}")


def pbt_search(task: Task, seed: int, settings: dict, folder: Path, device: str, log) -> dict:
    """One population-based training of `population` members, budget / population steps each; its best member's
    value and whole schedule of settings."""
    config = pbt.PbtConfig(
        task.algorithm, task.env_id, dimensions_of(task), total_steps=settings["member_steps"],
        ready_interval=settings["ready_interval"], population=settings["population"],
        eval_interval=settings["ready_interval"], eval_episodes=settings["eval_episodes"],
        objective=settings["objective"], quantile=settings["quantile"], seed=seed, device=device,
        preset=preset_of(task), folder=folder)
    log(f"a population of {config.population}, {config.total_steps:,} steps each, ready every "
        f"{config.ready_interval:,} steps")
    members, copies = pbt.population_based_training(config, log=lambda line: log("  " + line))
    for checkpoint in folder.glob("*.zip"):  # the copies' checkpoints: used, and large at scale
        checkpoint.unlink()
    values = {member.number: pbt.score([value for _, value in member.evaluations], config.objective)
              for member in members}
    best = max(members, key=lambda member: (values[member.number], -member.number))
    schedule = pbt.whole_schedule(best.number, {member.number: member.schedule[0][1] for member in members},
                                  [(copy.member, copy.donor, copy.step, copy.new) for copy in copies])
    finite = math.isfinite(values[best.number])
    return {"best": values[best.number] if finite else None, "best_member": best.number,
            "schedule": [[step, dict(values)] for step, values in schedule],
            "steps": sum(member.agent.steps_done for member in members), "copies": len(copies),
            "members": [{"number": member.number, "value": values[member.number] if math.isfinite(values[member.number])
                         else None, "steps": member.agent.steps_done} for member in members]}


# --- the best settings trained again on fresh seeds -----------------------------------------------------------

class Schedule(Sink):
    """Hands the runner a schedule of live changes once ({"values", "step"}: applied when the run reaches that
    step), and keeps the evaluations' mean returns."""

    def __init__(self, changes: list[tuple[int, dict]]):
        self.pending = [{"values": values, "step": step} for step, values in changes]
        self.evaluations: list[float] = []

    def emit(self, event: dict) -> None:
        value = (event.get("values") or {}).get("eval/return_mean")
        if event["kind"] == "eval" and isinstance(value, (int, float)):
            self.evaluations.append(float(value))

    def changes(self) -> list[dict]:
        pending, self.pending = self.pending, []
        return pending


def train_once(task_name: str, schedule: list, steps: int, seed: int, episodes: int, device: str) -> float:
    """Train the task from its preset with `schedule` ([step, settings]: the first at step 0) for `steps` env steps
    on `seed`; the final evaluation's mean return over `episodes` episodes."""
    import torch

    import trainer

    torch.set_num_threads(1)
    task = TASKS[task_name]
    agent = trainer.make(task.algorithm, task.env_id, seed=seed, device=device, preset=preset_of(task),
                         **schedule[0][1])
    sink = Schedule([(step, values) for step, values in schedule[1:]])
    agent.learn(steps, sink=sink, eval_interval=0, eval_episodes=episodes)
    return sink.evaluations[-1]


def rerun(task_name: str, method: str, seed: int, entry: dict, settings: dict, jobs: int, device: str) -> dict:
    """The best settings (PBT: the best member's schedule) trained on `rerun_seeds` fresh seeds, `jobs` at once."""
    if method == "pbt":
        schedule, steps = entry["schedule"], settings["member_steps"]
    else:
        schedule, steps = [[0, entry["best_params"]]], settings["trial_steps"]
    seeds = [1_000_000 + 1000 * seed + index for index in range(settings["rerun_seeds"])]  # no sweep trains these
    started = time.perf_counter()
    calls = [(task_name, schedule, steps, fresh, settings["rerun_episodes"], device) for fresh in seeds]
    if min(jobs, len(seeds)) <= 1:
        values = [train_once(*call) for call in calls]
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(seeds)), mp_context=get_context("spawn")) as pool:
            values = list(pool.map(train_once, *zip(*calls)))
    return {"seeds": seeds, "values": values, "mean": statistics.fmean(values),
            "seconds": time.perf_counter() - started}


# --- results.json ---------------------------------------------------------------------------------------------

def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def save(path: Path, results: dict) -> None:
    """Written whole to a file beside it, then renamed over it: a run killed while writing leaves the last one."""
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(results, indent=1))
    os.replace(partial, path)


def key(task: str, method: str, seed: int) -> str:
    return f"{task}/{method}/{seed}"


def settings_of(args, task: Task) -> dict:
    trial_steps = args.trial_steps or task.trial_steps
    budget = args.budget_steps or 20 * trial_steps
    member_steps = budget // args.population
    return {"budget_steps": budget, "trial_steps": trial_steps, "population": args.population,
            "quantile": args.quantile,
            "member_steps": member_steps, "ready_interval": args.ready_interval or max(1, member_steps // 10),
            "eval_episodes": args.eval_episodes, "objective": args.objective, "rerun_seeds": args.rerun_seeds,
            "rerun_episodes": args.rerun_episodes, "warmup_steps": args.warmup_steps,
            "startup_trials": args.startup_trials}


def relevant(method: str) -> tuple[str, ...]:
    """The settings a method's results depend on: a stored result at other values is not resumed."""
    shared = ("budget_steps", "eval_episodes", "objective", "rerun_seeds", "rerun_episodes")
    if method == "pbt":
        return shared + ("population", "quantile", "ready_interval")
    return shared + ("trial_steps",) + (("warmup_steps", "startup_trials") if method == "tpe-median" else ())


# --- the table ------------------------------------------------------------------------------------------------

def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.1f} ± {spread:.1f}"


def steps_to_match(entry: dict, target: float) -> int | None:
    """The env steps of every trial started up to the first complete trial whose value reached `target` (None if
    none did): what the sweep had spent when it matched."""
    spent = 0
    for trial in sorted(entry["trials"], key=lambda trial: trial["number"]):
        spent += trial["steps"]
        if trial["state"] == "complete" and trial["value"] is not None and trial["value"] >= target:
            return spent
    return None


def table(task_name: str, results: dict, methods: list[str], seeds: list[int]) -> list[str]:
    task = TASKS[task_name]
    runs = {method: [results["runs"][key(task_name, method, seed)] for seed in seeds
                     if key(task_name, method, seed) in results["runs"]] for method in methods}
    runs = {method: entries for method, entries in runs.items() if entries}
    if not runs:
        return [f"{task_name}: nothing measured yet"]
    settings = next(iter(runs.values()))[0]["settings"]
    lines = [f"{task_name}: {task.algorithm} on {task.env_id}, {settings['budget_steps']:,} env steps per method and "
             f"sweep seed; trials of {settings['trial_steps']:,} steps; PBT: {settings['population']} members of "
             f"{settings['member_steps']:,} steps, ready every {settings['ready_interval']:,}; objective "
             f"{settings['objective']}; re-run on {settings['rerun_seeds']} fresh seeds",
             "", "| method | sweep seeds | best (mean ± std) | re-run, fresh seeds | env steps | wall time | "
                 "steps to random's best |", "|---|---|---|---|---|---|---|"]
    random_best = {entry["seed"]: entry["best"] for entry in runs.get("random", []) if entry["best"] is not None}
    for method, entries in runs.items():
        bests = [entry["best"] for entry in entries if entry["best"] is not None]
        reruns = [entry["rerun"]["mean"] for entry in entries if entry.get("rerun")]
        to_match = "-"
        if method not in ("random", "pbt") and random_best:
            matched = [steps_to_match(entry, random_best[entry["seed"]]) for entry in entries
                       if entry["seed"] in random_best]
            reached = [steps for steps in matched if steps is not None]
            to_match = (f"{statistics.fmean(reached):,.0f}" if reached else "never") + \
                (f" ({len(reached)} of {len(matched)} seeds)" if len(reached) < len(matched) else "")
        lines.append(f"| {method} | {','.join(str(entry['seed']) for entry in entries)} | {mean_std(bests)} | "
                     f"{f'{statistics.fmean(reruns):.1f}' if reruns else '-'} | "
                     f"{statistics.fmean(entry['steps'] for entry in entries):,.0f} | "
                     f"{statistics.fmean(entry['seconds'] for entry in entries):,.0f} s | {to_match} |")
    lines += ["", *targets(runs)]
    return lines


def summary(entries: list[dict]) -> tuple[float, float, float | None] | None:
    """(best, steps, re-run) means over the sweep seeds, or None when no seed found a best."""
    bests = [entry["best"] for entry in entries if entry["best"] is not None]
    if not bests:
        return None
    reruns = [entry["rerun"]["mean"] for entry in entries if entry.get("rerun")]
    return (statistics.fmean(bests), statistics.fmean(entry["steps"] for entry in entries),
            statistics.fmean(reruns) if reruns else None)


def targets(runs: dict) -> list[str]:
    def rerun_text(first, second) -> str:
        if first[2] is None or second[2] is None:
            return ""
        return f" (re-run on fresh seeds: {first[2]:.1f} against {second[2]:.1f})"

    lines = []
    pruned = next((method for method in PRUNED if method in runs), None)
    plain, chosen = summary(runs.get("random", [])), summary(runs[pruned]) if pruned else None
    if plain and chosen:
        share = chosen[1] / plain[1]
        verdict = "PASS" if chosen[0] >= plain[0] and share <= STEPS_TARGET else "FAIL"
        lines.append(f"{verdict}: pruned TPE ({pruned}) best {chosen[0]:.1f} >= random search's {plain[0]:.1f} with "
                     f"<= {STEPS_TARGET:.0%} of its steps: it used {share:.0%}{rerun_text(chosen, plain)}")
    else:
        lines.append("not measured: pruned TPE against random search (needs random and tpe-median or tpe-hyperband)")
    population, tpe = summary(runs.get("pbt", [])), summary(runs.get("tpe", []))
    if population and tpe:
        verdict = "PASS" if population[0] >= tpe[0] else "FAIL"
        lines.append(f"{verdict}: PBT's best {population[0]:.1f} >= TPE's {tpe[0]:.1f} at the same budget (PBT used "
                     f"{population[1]:,.0f} steps, TPE {tpe[1]:,.0f}){rerun_text(population, tpe)}")
    else:
        lines.append("not measured: PBT against TPE (needs pbt and tpe)")
    return lines


# --- the command ----------------------------------------------------------------------------------------------

def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks search")
    parser.add_argument("--task", default="cartpole-dqn", help=f"comma-separated: {', '.join(TASKS)}")
    parser.add_argument("--methods", default="random,tpe,tpe-median,pbt", help=f"comma-separated: {', '.join(METHODS)}")
    parser.add_argument("--seeds", default="0,1,2", help="the sweep seeds, comma-separated")
    parser.add_argument("--budget-steps", type=int, default=None,
                        help="env steps per method and sweep seed (default: 20 trials' worth)")
    parser.add_argument("--trial-steps", type=int, default=None,
                        help="env steps of one Optuna trial (default: the task's, 50,000 for dqn, 300,000 for ppo)")
    parser.add_argument("--population", type=int, default=8, help="pbt: members, each of budget / population steps")
    parser.add_argument("--ready-interval", type=int, default=None,
                        help="pbt: env steps between copies (default: a tenth of a member's steps)")
    parser.add_argument("--quantile", type=float, default=pbt.DEFAULT_QUANTILE,
                        help="pbt: the share of members that copy, and that are copied (0.5 for a population of 2)")
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help="tpe-median: prune no trial before this step (default: a third of a trial's steps)")
    parser.add_argument("--startup-trials", type=int, default=None,
                        help="tpe-median: finished trials before any is pruned (default: by the trials, as sweeps)")
    parser.add_argument("--eval-episodes", type=int, default=5, help="episodes of each evaluation while searching")
    parser.add_argument("--objective", default="final", help="a trial's or member's value: final, best or last-N")
    parser.add_argument("--rerun-seeds", type=int, default=2, help="fresh seeds the best settings are trained on again")
    parser.add_argument("--rerun-episodes", type=int, default=20, help="episodes of a re-run's final evaluation")
    parser.add_argument("--jobs", type=int, default=2, help="Optuna trials (and re-runs) at once; pbt trains in turn")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", required=True, help="folder of results.json and the studies; the same one resumes")
    parser.add_argument("--report", action="store_true", help="print the tables of what --out holds; train nothing")
    args = parser.parse_args(argv)
    tasks, methods = args.task.split(","), args.methods.split(",")
    seeds = [int(seed) for seed in args.seeds.split(",")]
    unknown = [name for name in tasks if name not in TASKS] + [name for name in methods if name not in METHODS]
    if unknown:
        parser.error(f"unknown task or method {', '.join(unknown)}")
    sweep.check_objective(args.objective)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = load(path)
    for task_name in tasks:
        settings = settings_of(args, TASKS[task_name])
        if settings["budget_steps"] < settings["trial_steps"] or settings["member_steps"] < 1:
            parser.error(f"{task_name}: the budget ({settings['budget_steps']:,}) is less than one trial or member")
        for method in methods:
            for seed in seeds:
                stored = results["runs"].get(key(task_name, method, seed))
                differ = [name for name in relevant(method)
                          if stored and stored["settings"].get(name) != settings[name]]
                if differ:
                    parser.error(f"{path} holds {key(task_name, method, seed)} with other "
                                 + ", ".join(f"{name} ({stored['settings'].get(name)})" for name in differ)
                                 + ": give those or another --out")
    if args.report:
        for task_name in tasks:
            print("\n".join(table(task_name, results, methods, seeds)), flush=True)
        return
    begun = time.perf_counter()
    for task_name in tasks:
        task, settings = TASKS[task_name], settings_of(args, TASKS[task_name])
        print(f"{task_name}: {task.algorithm} on {task.env_id} from preset {preset_of(task)}, searching "
              f"{' '.join(task.space)}; {settings['budget_steps']:,} env steps per method and sweep seed", flush=True)
        for seed in seeds:
            for method in methods:
                name = key(task_name, method, seed)

                def log(line: str, name=name) -> None:
                    print(f"[{time.perf_counter() - begun:7.0f} s] {name}: {line}", flush=True)

                entry = results["runs"].get(name)
                if entry is None:
                    log("started")
                    folder = out / task_name / method / f"seed{seed}"
                    shutil.rmtree(folder, ignore_errors=True)  # a sweep cut off before: its trials are not counted
                    folder.mkdir(parents=True)
                    started = time.perf_counter()
                    found = pbt_search(task, seed, settings, folder, args.device, log) if method == "pbt" else \
                        optuna_search(task, method, seed, settings, folder, args.jobs, args.device, log)
                    entry = {"task": task_name, "method": method, "seed": seed, "settings": settings, **found,
                             "seconds": time.perf_counter() - started, "rerun": None}
                    results["runs"][name] = entry
                    save(path, results)
                    best = f"{entry['best']:.2f}" if entry["best"] is not None else "none (no trial finished)"
                    log(f"finished in {entry['seconds']:.0f} s: best {best}, {entry['steps']:,} env steps")
                else:
                    log("in results.json" + (", re-run to do" if entry["rerun"] is None and entry["best"] is not None
                                             else ": skipped"))
                if entry["rerun"] is None and entry["best"] is not None and settings["rerun_seeds"] > 0:
                    entry["rerun"] = rerun(task_name, method, seed, entry, settings, args.jobs, args.device)
                    save(path, results)
                    log(f"re-run on fresh seeds {entry['rerun']['seeds']}: {entry['rerun']['values']} "
                        f"(mean {entry['rerun']['mean']:.2f}, {entry['rerun']['seconds']:.0f} s)")
        print("\n".join(table(task_name, results, methods, seeds)), flush=True)
