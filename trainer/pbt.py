"""Population-based training (Jaderberg et al. 2017, https://arxiv.org/abs/1711.09846):
`python -m trainer sweep ALGO ENV --method pbt --population 8 --ready-interval 10000 --param learning_rate=1e-5:1e-2:log`.

A population of members trains at once, each with its own values of the searched hyperparameters (drawn at
random from the space at the start). Every `ready_interval` env steps (the ready point) every member is scored
by its recent evaluations (the sweep's objective over the evaluations so far: the final one, or the mean of the
last N). The members in the bottom `quantile` exploit: each copies the latest checkpoint of a member drawn from
the top `quantile` (weights, optimizer state, normalisation statistics, and that member's values), keeps its own
seed, and explores: each searched value is multiplied by 0.8 or 1.2 (a choice moves to a neighbouring one), or,
with `resample_probability`, drawn anew from the space. It then trains on from the copied step. Only settings
that are safe to change while a run trains (`Param.live`) may be searched, since the new values are applied to
a running agent as a live change is.

The rules (`exploit`, `explore`, `initial_values`) are shared with the web's population (rlweb/sweeps/pbt.py),
where each member is a run on the queue's workers; `population_based_training` below is the command line's
loop, which trains the members in turn in this process, one ready interval at a time: each member's run is
stopped at its evaluation at the ready step (as the web's are) and goes on from there, so that its schedules run
over the whole of `total_steps`.
"""

from __future__ import annotations

import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from trainer.events import Sink
from trainer.params import ConfigError
from trainer.sweep import Dimension, objective_value

FACTORS = (0.8, 1.2)
DEFAULT_QUANTILE = 0.25
DEFAULT_RESAMPLE_PROBABILITY = 0.25


def check_dimensions(algorithm: str, dimensions: list[Dimension]) -> None:
    """Every searched hyperparameter must be live (safe to change while the run trains): ConfigError otherwise."""
    import trainer

    live = {param.name for param in trainer.get_spec(algorithm).params() if param.live}
    searched = [dimension for dimension in dimensions if not dimension.fixed]
    if not searched:
        raise ConfigError({"param": "population-based training needs at least one searched hyperparameter"})
    errors = {dimension.name: "population-based training searches only settings that can change while a run "
                              "trains (live ones: python -m trainer list --params ALGO marks them)"
              for dimension in searched if dimension.name not in live}
    if errors:
        raise ConfigError(errors)


def check_rules(population: int, quantile: float, resample_probability: float) -> None:
    errors = {}
    if population < 2:
        errors["population"] = "at least 2 members"
    if not 0 < quantile <= 0.5:
        errors["quantile"] = "above 0 and at most 0.5 (the bottom and the top must not overlap)"
    elif int(population * quantile) < 1:
        errors["quantile"] = f"{quantile:g} of {population} members is no member: raise it or the population"
    if not 0 <= resample_probability <= 1:
        errors["resample_probability"] = "from 0 to 1"
    if errors:
        raise ConfigError(errors)


def sample(dimension: Dimension, rng: random.Random):
    """A value drawn from the dimension's space: uniform (or log-uniform) over a range, one of its choices."""
    if dimension.low is None:
        return rng.choice(dimension.choices)
    low, high = float(dimension.low), float(dimension.high)
    value = math.exp(rng.uniform(math.log(low), math.log(high))) if dimension.log else rng.uniform(low, high)
    return int(round(value)) if dimension.type is int else value


def initial_values(dimensions: list[Dimension], rng: random.Random) -> dict:
    """A new member's values: each searched one drawn from its space, each fixed one as it is."""
    return {dimension.name: dimension.choices[0] if dimension.fixed else sample(dimension, rng)
            for dimension in dimensions}


def explore(values: dict, dimensions: list[Dimension], rng: random.Random,
            resample_probability: float = DEFAULT_RESAMPLE_PROBABILITY) -> dict:
    """The values a member that copied another goes on with: each searched value drawn anew with
    `resample_probability`, else multiplied by 0.8 or 1.2 (kept in its range; a whole number stays whole and moves
    by at least one), or a choice moved to a neighbouring one."""
    explored = dict(values)
    for dimension in dimensions:
        if dimension.fixed:
            continue
        value = values.get(dimension.name)
        if value is None or rng.random() < resample_probability:
            explored[dimension.name] = sample(dimension, rng)
        elif dimension.low is None:
            choices = list(dimension.choices)
            index = choices.index(value) if value in choices else 0
            explored[dimension.name] = choices[min(len(choices) - 1, max(0, index + rng.choice((-1, 1))))]
        else:
            factor = rng.choice(FACTORS)
            new = value * factor
            if dimension.type is int:
                new = int(round(new))
                if new == value:
                    new = value + (1 if factor > 1 else -1)
            explored[dimension.name] = min(dimension.high, max(dimension.low, new))
    return explored


def score(evaluations: list[float], objective: str) -> float:
    """A member's recent evaluation, to rank it: the objective over its evaluations so far (-inf with none, or
    one that is not finite)."""
    if not evaluations:
        return -math.inf
    value = objective_value(evaluations, objective if objective != "threshold" else "final")
    return value if math.isfinite(value) else -math.inf


def exploit(scores: dict, quantile: float, rng: random.Random) -> dict:
    """{member: the member it copies} for the members in the bottom `quantile` of `scores` ({member: score},
    higher is better), each copying one drawn from the top `quantile`. Ties are broken by the member's key, so
    the same scores give the same copies."""
    ranked = sorted(scores, key=lambda member: (scores[member], str(member)))
    count = int(len(ranked) * quantile)
    if count < 1 or len(ranked) < 2:
        return {}
    bottom, top = ranked[:count], ranked[-count:]
    return {member: rng.choice(top) for member in bottom}


def whole_schedule(number, firsts: dict, copies: list[tuple]) -> list[tuple[int, dict]]:
    """The values that made member `number`'s final weights, from step 0: [(step, values from then on)]. `firsts`:
    {member: its first values}; `copies`: (member, donor, step, new values) in the order made. Through each copy,
    back to the donor's own schedule up to the copied step, then on with the copier's values: launched again from
    step 0, these are the member's hyperparameter schedule."""
    def trace(member, until: float) -> list[tuple[int, dict]]:
        earlier = [copy for copy in copies if copy[0] == member and copy[2] < until]
        if not earlier:
            return [(0, firsts[member])]
        _, donor, step, new = earlier[-1]
        return trace(donor, step) + [(step, new)]

    return trace(number, math.inf)


# --- the command line's loop: the members trained in turn, in this process ------------------------------------

@dataclass
class PbtConfig:
    algorithm: str
    env_id: str
    dimensions: list[Dimension]
    total_steps: int
    ready_interval: int
    population: int = 8
    eval_interval: int | None = None  # None: the ready interval; else a divisor of it
    eval_episodes: int = 5
    objective: str = "final"
    quantile: float = DEFAULT_QUANTILE
    resample_probability: float = DEFAULT_RESAMPLE_PROBABILITY
    seed: int = 0
    device: str = "cpu"
    preset: str | None = None
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rlweb-pbt-")))


@dataclass
class Member:
    number: int
    agent: object
    values: dict
    evaluations: list[tuple[int, float]] = field(default_factory=list)  # (step, mean return)
    schedule: list[tuple[int, dict]] = field(default_factory=list)  # (step, values from then on)


@dataclass
class Copy:
    member: int
    donor: int
    step: int
    old: dict
    new: dict


class ReadySink(Sink):
    """Keeps a member's evaluations (step, mean return) as its runner reports them, and stops the run at the first
    evaluation at or past `ready_at` (below the end), as the web's members stop: the run itself still ends at
    `total_steps`, so its schedules (epsilon's decay, an annealed learning rate) run over the whole of it."""

    def __init__(self, member: Member, ready_at: int, total_steps: int):
        self.member, self.ready_at, self.total_steps = member, ready_at, total_steps
        self.ready = False

    def emit(self, event: dict) -> None:
        value = (event.get("values") or {}).get("eval/return_mean")
        if event["kind"] == "eval" and isinstance(value, (int, float)):
            step = int(event["step"])
            self.member.evaluations.append((step, float(value)))
            self.ready = self.ready or self.ready_at <= step < self.total_steps

    def should_stop(self) -> bool:
        return self.ready


def searched(values: dict, dimensions: list[Dimension]) -> dict:
    return {dimension.name: values[dimension.name] for dimension in dimensions if not dimension.fixed}


def copy_member(member: Member, donor: Member, config: PbtConfig, rng: random.Random) -> Copy:
    """`member` takes `donor`'s checkpoint (saved and loaded as a file, as the web's members do) with its own seed,
    then explores from `donor`'s values; the new ones are applied as a live change is."""
    import trainer

    path = donor.agent.save(config.folder / f"member{donor.number}-step{donor.agent.steps_done}.zip")
    agent = trainer.load(path, device=config.device)
    agent.seed = member.agent.seed
    new = explore(donor.values, config.dimensions, rng, config.resample_probability)
    changes = agent.check_live_changes(searched(new, config.dimensions))
    agent.apply_live_changes(changes, agent.steps_done / max(1, config.total_steps))
    copy = Copy(member.number, donor.number, agent.steps_done, searched(member.values, config.dimensions),
                searched(new, config.dimensions))
    member.agent, member.values = agent, new
    member.schedule.append((agent.steps_done, searched(new, config.dimensions)))
    return copy


def population_based_training(config: PbtConfig, log=print) -> tuple[list[Member], list[Copy]]:
    """Train the population to `total_steps`, one ready interval at a time, each member in turn; at each ready
    point below the end, the bottom members copy top ones. Returns the members and the copies made."""
    import torch

    import trainer

    check_dimensions(config.algorithm, config.dimensions)
    check_rules(config.population, config.quantile, config.resample_probability)
    torch.set_num_threads(1)
    rng = random.Random(config.seed)
    members = []
    for number in range(config.population):
        values = initial_values(config.dimensions, rng)
        agent = trainer.make(config.algorithm, config.env_id, seed=config.seed + number, device=config.device,
                             preset=config.preset, **values)
        members.append(Member(number, agent, values, schedule=[(0, searched(values, config.dimensions))]))
    copies: list[Copy] = []
    eval_interval = config.eval_interval or config.ready_interval
    if config.ready_interval % eval_interval:
        raise ConfigError({"ready_interval": f"a multiple of the evaluation interval ({eval_interval:,}): a member is "
                                             "ranked on the evaluation at its ready point"})
    step = 0
    while step < config.total_steps:
        step += config.ready_interval
        for member in members:
            member.agent.learn(0, end_step=config.total_steps, sink=ReadySink(member, step, config.total_steps),
                               eval_interval=eval_interval, eval_episodes=config.eval_episodes)
        if step >= config.total_steps:
            break
        scores = {member.number: score([value for _, value in member.evaluations], config.objective)
                  for member in members}
        for loser, donor in exploit(scores, config.quantile, rng).items():
            copy = copy_member(members[loser], members[donor], config, rng)
            copies.append(copy)
            log(f"step {copy.step}: member {copy.member} ({scores[loser]:.2f}) copies member {copy.donor} "
                f"({scores[donor]:.2f}): {describe(copy.old)} -> {describe(copy.new)}")
    return members, copies


def describe(values: dict) -> str:
    return ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in values.items())


def report(members: list[Member], copies: list[Copy], objective: str) -> list[str]:
    """One line per member (its final value and its schedule), then the best."""
    lines = []
    values = {}
    for member in members:
        values[member.number] = score([value for _, value in member.evaluations], objective)
        schedule = "; ".join(f"from step {step}: {describe(settings)}" for step, settings in member.schedule)
        lines.append(f"member {member.number}: value {values[member.number]:.2f}, {member.agent.steps_done} steps, "
                     f"{schedule}")
    lines.append(f"{len(copies)} copies; {sum(member.agent.steps_done for member in members)} env steps in all")
    best = max(members, key=lambda member: (values[member.number], -member.number))
    schedule = whole_schedule(best.number, {member.number: member.schedule[0][1] for member in members},
                              [(copy.member, copy.donor, copy.step, copy.new) for copy in copies])
    lines.append(f"best: member {best.number}, value {values[best.number]:.2f}; its whole schedule: "
                 + "; ".join(f"from step {step}: {describe(settings)}" for step, settings in schedule))
    return lines
