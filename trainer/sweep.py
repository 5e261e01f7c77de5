"""Hyperparameter sweeps with Optuna: `python -m trainer sweep ALGO ENV --param learning_rate=1e-5:1e-2:log`.

The search space is one `--param` per hyperparameter, checked against the algorithm's own bounds:

    NAME=LOW:HIGH        a range, of whole numbers or not as the hyperparameter is
    NAME=LOW:HIGH:log    the same on a log scale
    NAME=A|B|C           one of these values
    NAME=VALUE           a fixed value

Every trial trains the algorithm with one sample for `total_steps`, evaluating every `eval_interval` steps. Its
value is the objective over its evaluations (`final`, `best`, or `last-N`: the mean of the last N), averaged over
its `seeds` runs. The pruner decides on the first seed's evaluations as they come: a pruned trial stops right
after the evaluation that decided it (the runner asks its sink then) and is recorded with that step. A trial that raises (a
NaN loss, an env that crashes) is recorded as failed and the sweep goes on. Trials run `jobs` at a time, each
in a process of its own, sharing one study in Optuna's storage: a journal file by default, or a database URL.
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from trainer.events import Sink
from trainer.params import ConfigError, aliases_of

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("none", "median", "hyperband")
NEVER_REACHED = 2  # a trial that never reaches the threshold counts as this many times its budget


@dataclass(frozen=True)
class Dimension:
    """One hyperparameter of the search: a range (`low`..`high`, maybe on a log scale), choices, or fixed."""

    name: str
    type: type
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()

    @property
    def fixed(self) -> bool:
        return self.low is None and len(self.choices) == 1

    def suggest(self, trial):
        if self.low is None:
            return self.choices[0] if self.fixed else trial.suggest_categorical(self.name, list(self.choices))
        if self.type is int:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)


def parse_dimension(algorithm: str, text: str) -> Dimension:
    """A `--param` (NAME=LOW:HIGH[:log], NAME=A|B|C or NAME=VALUE) for `algorithm`; ConfigError when it is wrong.
    NAME may be another spelling of a hyperparameter (trainer/params.py, ALIASES): the dimension gets our name."""
    import trainer

    name, separator, raw = text.partition("=")
    spec = trainer.get_spec(algorithm)
    name, _, convert = aliases_of(spec.config_class).get(name.strip(), (name.strip(), None, None))
    params = {param.name: param for param in spec.params()}
    if not separator or not raw.strip():
        raise ConfigError({name or text: "expected NAME=LOW:HIGH[:log], NAME=A|B|C or NAME=VALUE"})
    if name not in params:
        raise ConfigError({name: f"{algorithm} has no such hyperparameter (python -m trainer list --params {algorithm})"})
    param = params[name]

    def value(part: str):
        try:
            return param.parse(convert(part.strip()) if convert else part.strip())
        except ValueError as error:
            raise ConfigError({name: f"{part.strip()!r}: {error}"}) from None

    if ":" in raw:
        parts = raw.split(":")
        log = len(parts) == 3 and parts[2].strip() == "log"
        if len(parts) not in (2, 3) or (len(parts) == 3 and not log) or param.type not in (int, float):
            raise ConfigError({name: "a range is LOW:HIGH or LOW:HIGH:log, of a number hyperparameter"})
        low, high = value(parts[0]), value(parts[1])
        if not low < high:
            raise ConfigError({name: f"the range's low end must be below its high end, got {low} and {high}"})
        if log and low <= 0:
            raise ConfigError({name: "a log scale needs a range above 0"})
        return Dimension(name, param.type, low=low, high=high, log=log)
    choices = tuple(dict.fromkeys(value(part) for part in raw.split("|")))
    return Dimension(name, param.type, choices=choices)


def value_so_far(evaluations: list[float], objective: str) -> float:
    """What a trial reports to its pruner after each evaluation: the objective over the evaluations so far; for
    steps-to-threshold (the web's sweeps), which has no value before the end, the latest return made negative
    (a lower return is worse)."""
    if objective == "threshold":
        return -evaluations[-1]
    return objective_value(evaluations, objective)


def objective_value(evaluations: list[float], objective: str) -> float:
    """The trial's value from its evaluations' mean returns, in order: final, best, or last-N (their mean)."""
    if not evaluations:
        raise ValueError("the trial made no evaluation")
    if objective == "final":
        return evaluations[-1]
    if objective == "best":
        return max(evaluations)
    count = int(objective.removeprefix("last-"))
    return statistics.fmean(evaluations[-count:])


def steps_to_threshold(points: list[tuple[int, float]], threshold: float, total_steps: int) -> float:
    """The objective `threshold`: the step of the first evaluation (step, mean return) at or above `threshold`
    (fewer is better), or NEVER_REACHED times the budget when none is."""
    reached = [step for step, value in points if value >= threshold]
    return float(reached[0]) if reached else float(NEVER_REACHED * total_steps)


def check_objective(objective: str) -> str:
    if objective in ("final", "best", "threshold"):
        return objective
    if objective.startswith("last-") and objective.removeprefix("last-").isdigit() and int(objective[5:]) > 0:
        return objective
    raise ConfigError({"objective": f"final, best, last-N (N evaluations) or threshold, not {objective!r}"})


def default_startup_trials(trials: int) -> int:
    """Trials the median pruner lets finish before it prunes any: RL Zoo's 5, fewer in a small sweep."""
    return max(1, min(5, trials // 4))


@dataclass
class SweepConfig:
    algorithm: str
    env_id: str
    dimensions: list[Dimension]
    total_steps: int
    eval_interval: int
    eval_episodes: int = 5
    objective: str = "final"
    trials: int = 20
    jobs: int = 1
    seeds: int = 1
    seed: int = 0
    sampler: str = "tpe"
    pruner: str = "median"
    startup_trials: int | None = None  # the median pruner waits for this many finished trials (None: by trials)
    warmup_steps: int | None = None  # and prunes no trial before this step (None: a third of total_steps)
    device: str = "cpu"
    preset: str | None = None
    threshold: float | None = None  # the return to reach, for the objective `threshold`
    storage: str | None = None  # an Optuna storage URL; None: a journal file in `folder`
    study_name: str = "rlweb-sweep"
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rlweb-sweep-")))


class PruningSink(Sink):
    """Reports the trial's value so far (`value_so_far`: for last-3, the mean of the last three evaluations, which
    is steadier than one) after each evaluation, and stops the run once the pruner says so: `pruned_at` is the
    step, `reason` says why, and the run ends as `ends_as`. The one pruning sink of both sweeps: the command
    line's hands it the trial `study.optimize` gives; the web's (rlweb/sweeps/study.py) watches a worker's sink
    with it, reopening the trial at each evaluation (`trial_for`). `evaluations`: those made before (a resumed
    run's). Only the first seed of a trial reports (`prune`); the last evaluation decides nothing."""

    ends_as = "pruned"

    def __init__(self, trial, prune: bool, total_steps: int, objective: str = "final", evaluations=()):
        self.trial, self.prune, self.total_steps, self.objective = trial, prune, total_steps, objective
        self.evaluations: list[float] = [float(value) for value in evaluations]
        self.evaluation_steps: list[int] = []  # the steps of this run's evaluations (not the resumed run's)
        self.step = 0
        self.pruned_at: int | None = None
        self.reason = ""

    def emit(self, event: dict) -> None:
        self.step = max(self.step, int(event.get("step", 0)))
        value = (event.get("values") or {}).get("eval/return_mean")
        if event["kind"] != "eval" or not isinstance(value, (int, float)):
            return
        self.evaluations.append(float(value))
        step = int(event["step"])
        self.evaluation_steps.append(step)
        if self.prune and self.pruned_at is None and math.isfinite(value) and step < self.total_steps:
            self.ask_pruner(step)

    def trial_for(self, step: int):
        """The Optuna trial to report to (a subclass may open it anew each time)."""
        return self.trial

    def ask_pruner(self, step: int) -> None:
        trial = self.trial_for(step)
        value = value_so_far(self.evaluations, self.objective)
        trial.report(value, step)
        if trial.should_prune():
            self.prune_at(step, self.why(step, value))

    def why(self, step: int, value: float) -> str:
        return f"pruned at step {step:,}: value so far {value:.2f}"

    def prune_at(self, step: int, reason: str) -> None:
        self.pruned_at, self.reason = step, reason

    def should_stop(self) -> bool:
        return self.pruned_at is not None


def run_trial(trial, config: SweepConfig) -> float:
    """One trial: its sample, trained on each seed; the objective's mean over them (optuna.TrialPruned when the
    pruner stopped it)."""
    import optuna

    import trainer

    sample = {dimension.name: dimension.suggest(trial) for dimension in config.dimensions}
    values, steps = [], 0
    for index in range(config.seeds):
        agent = trainer.make(config.algorithm, config.env_id, seed=config.seed + 1000 * trial.number + index,
                             device=config.device, preset=config.preset, **sample)
        sink = PruningSink(trial, prune=index == 0, total_steps=config.total_steps, objective=config.objective)
        agent.learn(config.total_steps, sink=sink, eval_interval=config.eval_interval,
                    eval_episodes=config.eval_episodes)
        steps += sink.step
        trial.set_user_attr("steps", steps)
        if sink.pruned_at is not None:
            trial.set_user_attr("pruned_at", sink.pruned_at)
            raise optuna.TrialPruned(sink.reason)
        if config.objective == "threshold":
            value = steps_to_threshold(list(zip(sink.evaluation_steps, sink.evaluations)), config.threshold,
                                       config.total_steps)
        else:
            value = objective_value(sink.evaluations, config.objective)
        if not math.isfinite(value):
            raise ValueError(f"the evaluation returned {value}")
        values.append(value)
    return statistics.fmean(values)


def make_sampler(config: SweepConfig, process: int = 0):
    """The sampler of the `process`th of the sweep's processes: each has its own seed, or they would all draw
    the same samples."""
    import optuna

    seed = config.seed + 7919 * process
    if config.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if config.sampler == "grid":
        ranges = [dimension.name for dimension in config.dimensions if dimension.low is not None]
        if ranges:
            raise ConfigError({"sampler": f"the grid sampler needs lists of values, not ranges ({', '.join(ranges)})"})
        # one seed for every process: the grid sampler shuffles the grid by its seed and gives the trial numbered
        # k the k-th point, so processes shuffling differently would train some points twice and miss others
        return optuna.samplers.GridSampler({dimension.name: list(dimension.choices) for dimension in config.dimensions
                                            if not dimension.fixed}, seed=config.seed)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(config: SweepConfig):
    import optuna

    if config.pruner == "median":  # an RL curve is noisy early: RL Zoo's settings, in env steps
        warmup = config.total_steps // 3 if config.warmup_steps is None else config.warmup_steps
        startup = default_startup_trials(config.trials) if config.startup_trials is None else config.startup_trials
        return median_pruner(n_startup_trials=startup, n_warmup_steps=warmup)
    if config.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=config.eval_interval, max_resource=config.total_steps)
    return optuna.pruners.NopPruner()


def finished_trials(study) -> list:
    """The study's finished (complete) trials, as stored: not copied."""
    import optuna

    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def finished_values_at(finished: list, step: int) -> list[float]:
    """The values so far at `step` of the `finished` trials that reported one: what the median pruner compares a
    trial with."""
    return [trial.intermediate_values[step] for trial in finished if step in trial.intermediate_values]


def at_the_floor(value: float, others: list[float]) -> bool:
    """Whether a trial whose value so far is `value` has shown nothing yet next to the finished trials' values
    `others` at the same step: no better than the worst of them, where at least half of them are and at least
    one did better (Acrobot's -500 of a pendulum that never swung up)."""
    if not others:
        return False
    worst = min(others)
    return value <= worst < max(others) and sorted(others)[(len(others) - 1) // 2] == worst


def median_pruner(n_startup_trials: int, n_warmup_steps: int):
    """Optuna's median pruner, which also prunes a trial tied with the median at the floor (`at_the_floor`).

    Optuna's prunes only a trial strictly below the median. Early in an RL sweep most trials score the env's
    worst return (-500 on Acrobot-v1 until the pendulum swings up), the median is that floor, and a trial
    that has learned nothing ties it: it trained on until the median rose, half its run or more later. In a
    recorded 20-trial dqn sweep on Acrobot-v1 (100k steps a trial), replayed: 17% of the steps saved with
    Optuna's rule, 40% with this one after 20k steps, the best trial kept by both (docs/benchmarks.md)."""
    import optuna

    class MedianPruner(optuna.pruners.MedianPruner):
        startup_trials, warmup_steps = n_startup_trials, n_warmup_steps  # ours: Optuna keeps its own private

        def prune(self, study, trial) -> bool:
            if super().prune(study, trial):
                return True
            step = trial.last_step
            if step is None or step < self.warmup_steps:
                return False
            finished = finished_trials(study)  # read once: with the database's storage, a query
            if len(finished) < self.startup_trials:
                return False
            best = max(value for at, value in trial.intermediate_values.items() if at <= step)
            return at_the_floor(best, finished_values_at(finished, step))

    return MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=n_warmup_steps)


def storage_of(config: SweepConfig):
    import optuna

    if config.storage:
        return optuna.storages.RDBStorage(config.storage) if "://" in config.storage else config.storage
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(config.folder / "study.journal")))


def load_study(config: SweepConfig, pruner=None, process: int = 0):
    import optuna

    direction = "minimize" if config.objective == "threshold" else "maximize"  # fewer steps to the return
    return optuna.create_study(study_name=config.study_name, storage=storage_of(config), direction=direction,
                               sampler=make_sampler(config, process), pruner=pruner or make_pruner(config),
                               load_if_exists=True)


def optimize(config: SweepConfig, pruner=None, process: int = 0) -> None:
    """The `process`th process's share of the sweep's `config.trials` trials (shares, not a count the processes
    check as they go: two of them would both start the last trial)."""
    import optuna
    import torch

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(config, pruner, process)
    share = config.trials // config.jobs + (process < config.trials % config.jobs)
    study.optimize(lambda trial: run_trial(trial, config), n_trials=share, catch=(Exception,))


def sweep(config: SweepConfig, pruner=None):
    """Run the sweep (`jobs` processes at once) and return the finished study."""
    if config.sampler not in SAMPLERS:
        raise ConfigError({"sampler": f"one of {', '.join(SAMPLERS)}, not {config.sampler!r}"})
    if config.pruner not in PRUNERS:
        raise ConfigError({"pruner": f"one of {', '.join(PRUNERS)}, not {config.pruner!r}"})
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_objective(config.objective)
    if config.objective == "threshold" and (config.threshold is None or not math.isfinite(config.threshold)):
        raise ConfigError({"threshold": "the objective threshold needs the return to reach"})
    make_sampler(config)  # a grid over a range is refused before anything trains
    load_study(config, pruner)  # created once, before the processes load it
    if config.jobs == 1:
        optimize(config, pruner)
    else:
        context = multiprocessing.get_context("spawn")
        processes = [context.Process(target=optimize, args=(config, pruner, process))
                     for process in range(config.jobs)]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
    return load_study(config, pruner)


def report(study) -> list[str]:
    """The trials, one line each, then the best one."""
    import optuna

    lines = []
    for trial in study.trials:
        value = f"{trial.value:.2f}" if trial.value is not None else "-"
        steps = trial.user_attrs.get("steps", 0)
        lines.append(f"trial {trial.number}: {trial.state.name.lower()}, value {value}, {steps} steps, {trial.params}")
    done = [trial for trial in study.trials if trial.state == optuna.trial.TrialState.COMPLETE]
    total = sum(trial.user_attrs.get("steps", 0) for trial in study.trials)
    lines.append(f"{len(done)} complete, {sum(t.state.name == 'PRUNED' for t in study.trials)} pruned, "
                 f"{sum(t.state.name == 'FAIL' for t in study.trials)} failed; {total} env steps in all")
    if done:
        lines.append(f"best: trial {study.best_trial.number}, value {study.best_value:.2f}, {study.best_params}")
    return lines
