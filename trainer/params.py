"""Hyperparameter schemas, declared once on an algorithm's config dataclass.

A config field made with `param(...)` carries its help text and bounds; `schema(config_class)` turns
the dataclass into `Param`s that the web form, the command line and the Python API all validate with.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any


MAX_MAGNITUDE = 10**12  # the largest number any hyperparameter takes, whatever its own bounds

BEFORE = "rlweb's earlier name"  # our own earlier spelling: stored experiments and old checkpoints use it
SB3 = "stable-baselines3"


def net_arch_text(value):
    """stable-baselines3's `net_arch` ([64, 64], or {"pi": [..], "qf": [..]} with the same sizes) as our
    "64,64"; anything else goes on to the hyperparameter's own parsing, which refuses it."""
    if isinstance(value, dict) and value and all(layers == next(iter(value.values())) for layers in value.values()):
        value = next(iter(value.values()))
    if isinstance(value, (list, tuple)):
        return ",".join(str(size) for size in value)
    return value


def schedule_from_annealing(value):
    """Our DDPG's old `lr_annealing` switch as the `lr_schedule` every other algorithm has."""
    try:
        return "linear" if Param("lr_annealing", bool, False, "").parse(value) else "constant"
    except ValueError:
        return value


# One name per idea across algorithms. Every other spelling of it (ours before, the source documents',
# stable-baselines3's) is accepted wherever a config is built: the form, the command line, the Python API,
# stored experiments and checkpoints. alias -> (our name, where the alias comes from, value conversion).
# An alias applies to an algorithm whose config has our name and no field of the alias's own name.
ALIASES: dict[str, tuple[str, str, Any]] = {
    "adam_epsilon": ("optimizer_epsilon", BEFORE, None),
    "adam_eps": ("optimizer_epsilon", BEFORE, None),
    "optimizer_eps": ("optimizer_epsilon", BEFORE, None),
    "target_update_tau": ("tau", BEFORE, None),
    "target_alpha": ("tau", "Lightning Bolts", None),
    "n_step": ("n_step_return", BEFORE, None),
    "lr_pi": ("policy_learning_rate", "pytorchrl", None),
    "mu_lr": ("policy_learning_rate", "rlib", None),
    "lr_v": ("critic_learning_rate", "pytorchrl", None),
    "q_learning_rate": ("critic_learning_rate", BEFORE, None),
    "q_lr": ("critic_learning_rate", "rlib", None),
    "value_learning_rate": ("critic_learning_rate", BEFORE, None),
    "entropy_beta": ("entropy_coef", "Lightning Bolts", None),
    "ent_coef": ("entropy_coef", SB3, None),
    "critic_beta": ("value_coef", "Lightning Bolts", None),
    "vf_coef": ("value_coef", SB3, None),
    "normalize_observation": ("normalize_observations", BEFORE, None),
    "norm_obs": ("normalize_observations", "stable-baselines3 VecNormalize", None),
    "normalize_reward": ("normalize_rewards", BEFORE, None),
    "norm_reward": ("normalize_rewards", "stable-baselines3 VecNormalize", None),
    "train_freq": ("train_frequency", SB3, None),
    "num_updates_per_iter": ("gradient_steps", "rlib", None),
    "replay_size": ("buffer_size", "Lightning Bolts", None),
    "warm_start_size": ("learning_starts", "Lightning Bolts", None),
    "sync_rate": ("target_update_interval", "Lightning Bolts", None),
    "policy_delay": ("delay_policy_update", SB3, None),
    "target_policy_noise": ("target_noise", SB3, None),
    "lr_annealing": ("lr_schedule", BEFORE, schedule_from_annealing),
    "net_arch": ("hidden_layers", SB3, net_arch_text),
    "n_envs": ("num_envs", SB3, None),
    "l2_coeff": ("l2_coef", BEFORE, None),
    "ext_adv_coeff": ("ext_adv_coef", "pytorchrl", None),
    "int_adv_coeff": ("int_adv_coef", "pytorchrl", None),
    "epsilon_start": ("exploration_initial_eps", BEFORE, None),
    "epsilon_min": ("exploration_final_eps", BEFORE, None),
    "epsilon_decay": ("exploration_decay", BEFORE, None),
    "normalize_returns": ("normalize_batch_returns", BEFORE, None),
}


class ConfigError(ValueError):
    """Bad hyperparameters or environment: `errors` maps a field name (or "env_id") to a message."""

    def __init__(self, errors: dict[str, str]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{name}: {message}" for name, message in self.errors.items()))

    def __reduce__(self):  # from a worker process (a multiprocessing pool, an async env) back whole, not as its text
        return type(self), (self.errors,)


def param(default, help: str, *, low=None, high=None, low_inclusive=True, high_inclusive=True, choices=None,
          aliases: dict[str, str] | None = None, live: bool = False):
    """A config field with its schema: `low`/`high` bound numbers, `choices` lists allowed strings, `aliases`
    maps other spellings that only this algorithm accepts for it to where they come from (see ALIASES), `live`
    says that a running run may change it (`check_live_changes`, `Agent.apply_live_changes`)."""
    metadata = dict(help=help, low=low, high=high, low_inclusive=low_inclusive, high_inclusive=high_inclusive,
                    choices=tuple(choices) if choices else None, aliases=dict(aliases or {}), live=live)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Param:
    name: str
    type: type  # int, float, bool or str
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    choices: tuple | None = None
    aliases: tuple[tuple[str, str], ...] = ()  # (other spelling, where it comes from), accepted as this name
    live: bool = False  # safe to change while the run trains (a learning rate, not a network's size)

    def parse(self, raw: Any) -> Any:
        """Convert `raw` (a string from a form or command line, or a Python value) and check its bounds."""
        value = self._convert(raw)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"must be one of {', '.join(map(str, self.choices))}")
        if self.type in (int, float):
            # The field's own bounds first, so learning_rate=1e32 hears "at most 1", not the catch-all below.
            if self.low is not None and (value < self.low or (value == self.low and not self.low_inclusive)):
                raise ValueError(f"must be {'at least' if self.low_inclusive else 'greater than'} {self.low}")
            if self.high is not None and (value > self.high or (value == self.high and not self.high_inclusive)):
                raise ValueError(f"must be {'at most' if self.high_inclusive else 'less than'} {self.high}")
            if abs(value) > MAX_MAGNITUDE:  # no setting needs more; 1e308 or a 309-digit step count is a typo
                raise ValueError(f"must be between -{MAX_MAGNITUDE:.0e} and {MAX_MAGNITUDE:.0e}")
        return value

    def _convert(self, raw: Any) -> Any:
        if self.type is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off", ""):
                return False
            raise ValueError("must be true or false")
        if self.type is int:
            if isinstance(raw, bool):
                raise ValueError("must be a whole number")
            if isinstance(raw, int):
                return raw
            if isinstance(raw, float):
                if raw.is_integer():
                    return int(raw)
                raise ValueError("must be a whole number")
            try:
                return int(str(raw).strip())
            except ValueError:
                try:
                    number = float(str(raw).strip())
                except ValueError:
                    raise ValueError("must be a whole number") from None
                if math.isfinite(number) and number.is_integer():
                    return int(number)
                raise ValueError("must be a whole number") from None
        if self.type is float:
            if isinstance(raw, bool):
                raise ValueError("must be a number")
            try:
                value = float(str(raw).strip()) if not isinstance(raw, (int, float)) else float(raw)
            except ValueError:
                raise ValueError("must be a number") from None
            if not math.isfinite(value):
                raise ValueError("must be a finite number")
            return value
        return str(raw)

    def describe(self) -> dict:
        """The schema as plain JSON, for the web form's help text and the API."""
        return dict(name=self.name, type=self.type.__name__, default=self.default, help=self.help, low=self.low,
                    high=self.high, low_inclusive=self.low_inclusive, high_inclusive=self.high_inclusive,
                    choices=list(self.choices) if self.choices else None, aliases=dict(self.aliases),
                    live=self.live)

    def aliases_text(self) -> str:
        """The upstream names, for help texts: "Also accepted as ent_coef (stable-baselines3)." or "". Our own
        earlier names are accepted too, without a word (README, "Hyperparameter names")."""
        upstream = [f"{alias} ({source})" for alias, source in self.aliases if source != BEFORE]
        return f"Also accepted as {', '.join(upstream)}." if upstream else ""


def schema(config_class) -> list[Param]:
    """The `Param`s of a config dataclass, in declaration order."""
    hints = typing.get_type_hints(config_class)
    aliases = aliases_of(config_class)
    params = []
    for field in dataclasses.fields(config_class):
        meta = field.metadata
        params.append(Param(name=field.name, type=hints[field.name], default=field.default, help=meta.get("help", ""),
                            low=meta.get("low"), high=meta.get("high"),
                            low_inclusive=meta.get("low_inclusive", True),
                            high_inclusive=meta.get("high_inclusive", True), choices=meta.get("choices"),
                            live=meta.get("live", False),
                            aliases=tuple((alias, source) for alias, (name, source, _) in aliases.items()
                                          if name == field.name)))
    return params


def aliases_of(config_class) -> dict[str, tuple[str, str, Any]]:
    """The ALIASES that apply to a config class, with the ones its fields declare (`param(aliases=...)`)."""
    names = {field.name for field in dataclasses.fields(config_class)}
    aliases = {alias: target for alias, target in ALIASES.items() if target[0] in names and alias not in names}
    for field in dataclasses.fields(config_class):
        for alias, source in field.metadata.get("aliases", {}).items():
            aliases[alias] = (field.name, source, None)
    return aliases


def canonical_names(config_class, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every alias replaced by our name (and its value converted where the alias's differs);
    ConfigError when one setting comes twice, under two names."""
    aliases = aliases_of(config_class)
    renamed, errors, given_as = {}, {}, {}
    for key, value in values.items():
        name, _, convert = aliases.get(key, (key, None, None))
        if name in renamed:
            errors[name] = f"given twice: as {given_as[name]} and as {key}"
            continue
        renamed[name], given_as[name] = (convert(value) if convert else value), key
    if errors:
        raise ConfigError(errors)
    return renamed


def parse_hidden_layers(text: str) -> tuple[int, ...]:
    """"256,256" -> (256, 256); "none" (or an empty string) means no hidden layer. Raises ValueError."""
    if str(text).strip().lower() == "none":
        return ()
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    try:
        sizes = tuple(int(part) for part in parts)
    except ValueError:
        raise ValueError("must be whole numbers separated by commas, e.g. 256,256, or none") from None
    if any(size < 1 or size > 65536 for size in sizes) or len(sizes) > 16:
        raise ValueError("needs 0 to 16 layers of 1 to 65536 units, e.g. 256,256")
    return sizes


VECTORIZATIONS = ("auto", "sync", "async", "ale")


def vectorization_param():
    """The `vectorization` field of every algorithm that steps several envs: in this process one after the
    other (sync), each in a process of its own (async: Gymnasium's AsyncVectorEnv), or, for Atari, in ale-py's
    own vector env, its C++ threads stepping them together (ale); auto picks ale for Atari ids, else sync."""
    return param("auto", "How the envs are stepped: one after the other in the training process (sync), each "
                         "in a process of its own (async), or for Atari in ale-py's vector env, in C++ threads, "
                         "one per core at most (ale). Auto: ale for Atari, sync for the others. Async pays when "
                         "one env step is slow (MuJoCo, Box2D) and there are cores to spare; for cheap envs such as "
                         "CartPole, sync is faster.",
                 choices=VECTORIZATIONS)


MOST_PROCESSES = 256


def processes_param():
    """The `processes` field of the algorithms that train one run on several processes (trainer/distributed.py):
    the on-policy ones, whose envs and batches split between them, and ES, whose candidates do."""
    return param(1, "Processes that train this run together (torch.distributed: on one host, or several), each "
                    "with its share of the envs and of every batch, on its own GPU when the host has one per "
                    "process: faster when stepping the envs or the update takes the time. The maths stays the "
                    "same: num_envs and batch_size are the run's, split between the processes.",
                 low=1, high=MOST_PROCESSES)


# The most gradient updates a run may make per env step, on average. Published high replay ratios stay well
# under it (REDQ and DroQ make 20); past it every env step waits on the updates, and the run holds its worker for
# many times as long as the same run at a usual ratio (issue 27: gradient_steps=100000 stalled a run).
MAX_UPDATES_PER_STEP = 100


def work_errors(config) -> dict[str, str]:
    """The per-step work budget (MAX_UPDATES_PER_STEP), on the setting that multiplies the updates: a training
    phase of `gradient_steps` updates every `train_frequency` env steps (or every vector step of `num_envs`, when
    that is more), or PPO's `n_epochs` passes over a rollout of n_steps x num_envs in minibatches of `batch_size`.
    A config with a positive `replay_ratio` makes that many updates per env step instead (bounded by its field)."""
    most = MAX_UPDATES_PER_STEP
    envs = max(1, int(getattr(config, "num_envs", 1) or 1))
    if hasattr(config, "gradient_steps") and hasattr(config, "train_frequency") \
            and not getattr(config, "replay_ratio", 0) > 0:
        steps_per_phase = max(int(config.train_frequency), envs)
        if config.gradient_steps > most * steps_per_phase:
            return {"gradient_steps": (
                f"must be at most {most * steps_per_phase:,} here: a training phase every {steps_per_phase:,} env "
                f"steps may make at most {most} gradient updates per env step ({config.gradient_steps:,} would be "
                f"{config.gradient_steps / steps_per_phase:,.0f}), or every step waits on the updates and the run "
                f"holds its worker for that much longer. Raise train_frequency with it to keep the ratio.")}
    if hasattr(config, "n_epochs") and hasattr(config, "n_steps") and hasattr(config, "batch_size"):
        rollout = int(config.n_steps) * envs
        minibatches = math.ceil(rollout / max(1, int(config.batch_size)))
        if config.n_epochs * minibatches > most * rollout:
            return {"n_epochs": (
                f"must be at most {most * rollout // minibatches:,} here: {config.n_epochs:,} passes over a rollout "
                f"of {rollout:,} env steps in {minibatches:,} minibatches would be more than {most} gradient updates "
                f"per env step, so every step would wait on the updates. Raise batch_size to make fewer, larger "
                f"minibatches.")}
    return {}


def shared_checks(config) -> dict[str, str]:
    """The checks that mean the same in every algorithm: layer sizes that parse (`hidden_layers`,
    `rnd_hidden_layers`), a batch no bigger than the replay buffer it is drawn from, envs and rollout batches
    that split equally between the processes, and the per-step work budget (`work_errors`)."""
    errors = work_errors(config)
    processes = getattr(config, "processes", 1)
    for name in ("num_envs", "batch_size"):
        value = getattr(config, name, None)
        if processes > 1 and value is not None and not hasattr(config, "buffer_size") and value % processes:
            errors[name] = f"must split equally between the {processes} processes (a multiple of {processes})"
    for field in dataclasses.fields(config):
        if field.name.endswith("hidden_layers"):
            try:
                parse_hidden_layers(getattr(config, field.name))
            except ValueError as error:
                errors[field.name] = str(error)
    if getattr(config, "batch_size", 0) > getattr(config, "buffer_size", math.inf):
        errors["batch_size"] = f"must not exceed the buffer size ({config.buffer_size})"
    return errors


def build_config(config_class, values: dict[str, Any]):
    """Parse `values` against the schema, apply defaults, run the config's own cross-field checks.

    Raises ConfigError listing every bad field, so a form can show each message next to its field.
    """
    params = {p.name: p for p in schema(config_class)}
    values = canonical_names(config_class, values)
    errors: dict[str, str] = {}
    unknown = sorted(set(values) - set(params))
    for name in unknown:
        errors[name] = f"unknown hyperparameter (known: {', '.join(params)})"
    parsed = {}
    for name, value in values.items():
        if name in params:
            try:
                parsed[name] = params[name].parse(value)
            except ValueError as error:
                errors[name] = str(error)
    if errors:
        raise ConfigError(errors)
    config = config_class(**parsed)
    check = getattr(config, "check", None)  # the algorithm's own cross-field checks
    errors = {**(check() if check is not None else {}), **shared_checks(config)}
    if errors:
        raise ConfigError(errors)
    return config


NOT_LIVE = "cannot be changed while the run trains"


def no_effect(why: str) -> str:
    """The refusal of a live change to a setting the run's config ignores, `why` being unused_settings' reason."""
    return f"has no effect on this run: {why}"


def check_live_changes(config_class, current: dict[str, Any], requested: dict[str, Any]) -> dict[str, Any]:
    """The changes `requested` of a running run whose hyperparameters are `current`, parsed and checked as a new
    config would be (bounds, the algorithm's own cross-field checks): {name: new value}, our names. ConfigError,
    keyed by name, for a hyperparameter that is not live, a bad value, or none asked for."""
    requested = canonical_names(config_class, requested)
    params = {p.name: p for p in schema(config_class)}
    errors = {name: NOT_LIVE if name in params else "unknown hyperparameter"
              for name in requested if name not in params or not params[name].live}
    if not requested:
        errors["hyperparameters"] = "no change asked for"
    if errors:
        raise ConfigError(errors)
    config = run_config(config_class, {**canonical_names(config_class, current), **requested})
    ignored = unused_settings(config)
    if ignored.keys() & requested.keys():
        raise ConfigError({name: no_effect(ignored[name]) for name in requested if name in ignored})
    return {name: getattr(config, name) for name in requested}


def run_config(config_class, values: dict[str, Any]):
    """The config of a run whose hyperparameters are `values`. They may name settings its config does not hold
    (`processes`, kept at 1 for a one-process algorithm): those are left out."""
    names = {param.name for param in schema(config_class)}
    return build_config(config_class, {name: value for name, value in canonical_names(config_class, values).items()
                                       if name in names})


def unused_settings(config) -> dict[str, str]:
    """{name: why} of the settings a config ignores (its `unused()`, where its algorithm has one), such as
    epsilon's schedule for a DQN that explores with noisy layers."""
    unused = getattr(config, "unused", None)
    return unused() if unused is not None else {}


# How many files one run may write: the run's intervals are checked against these before it starts
MAX_CHECKPOINTS = 1_000  # periodic checkpoints one run may write (its best and final ones come on top)
MAX_VIDEOS = 200  # episode videos one run may record


def shortest_interval(total_steps: int, most: int) -> int:
    """The shortest interval that gives at most `most` of something in a run of `total_steps` env steps."""
    return max(1, -(-int(total_steps) // most))


def interval_errors(total_steps: int, checkpoint_interval: int = 0, video_interval: int = 0) -> dict[str, str]:
    """The checkpoint and video intervals that would make too many files in a run of `total_steps` env steps, each
    with what it must be instead: 0 (off) or at least total_steps / MAX_CHECKPOINTS (MAX_VIDEOS). The web form, the
    command line and the runner all ask this, so a run never writes thousands of files."""
    errors = {}
    for name, interval, most, what in (("checkpoint_interval", checkpoint_interval, MAX_CHECKPOINTS, "checkpoints"),
                                       ("video_interval", video_interval, MAX_VIDEOS, "videos")):
        least = shortest_interval(total_steps, most)
        if interval and 0 < int(interval) < least:
            errors[name] = (f"must be 0 (off) or at least {least:,}: every {int(interval):,} of {int(total_steps):,} "
                            f"steps makes {int(total_steps) // int(interval):,} {what}, and a run makes at most "
                            f"{most:,}")
    return errors
