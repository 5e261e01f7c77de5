"""The algorithm registry: each algorithm's name, family, description, config schema and agent class.

Each algorithm module registers its specs here when it is imported, and this module imports none of
them (they import it). `trainer/__init__.py` imports `trainer.algorithms`, which imports every
algorithm module, and Python runs it before any `trainer.*` module: so by the time anything can call
`get_spec`, every algorithm is registered.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainer.envs import env_spaces, space_name
from trainer.params import MOST_PROCESSES, ConfigError, Param, build_config, canonical_names, schema
from trainer.resources import check_memory

# The families algorithms are grouped by (the web form's <optgroup>s, `python -m trainer list`), in order
DQN_FAMILY = "DQN family"
POLICY_GRADIENT = "Policy gradient"
CONTINUOUS_CONTROL = "Continuous control"
CLASSIC = "Classic"
FAMILIES = (DQN_FAMILY, POLICY_GRADIENT, CONTINUOUS_CONTROL, CLASSIC)


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    family: str  # one of FAMILIES
    description: str  # one line: what it is, and the paper
    config_class: type
    agent_class: type
    observation_spaces: tuple[str, ...]  # Gymnasium space class names it accepts
    action_spaces: tuple[str, ...]
    presets: tuple[tuple[str, object], ...] = ()  # defaults that differ from the config class
    # optional check of a built config against the env's spaces: (config, observation_space,
    # action_space) -> {field: message}; for what depends on both, e.g. bounds of a discretisation grid
    check_env: object = None

    def params(self) -> list[Param]:
        overrides = dict(self.presets)
        params = [_with_default(p, overrides[p.name]) if p.name in overrides else p for p in schema(self.config_class)]
        if not self.several_processes:  # shown, and checked, where the others have it: it must stay 1
            params.append(Param("processes", int, 1, self.one_process_reason(), low=1, high=1))
        return params

    @property
    def several_processes(self) -> bool:
        """Whether one run can train on several processes (`processes`, trainer/distributed.py)."""
        return any(field.name == "processes" for field in dataclasses.fields(self.config_class))

    def one_process_reason(self) -> str:
        faster = ("for slow envs, vectorization=async steps each env in a process of its own; for big networks, a "
                  "GPU (device cuda)" if any(field.name == "vectorization" for field in dataclasses.fields(
                      self.config_class)) else "a faster CPU")
        return (f"{self.name} trains in one process: it learns off-policy, and its time goes to its updates rather "
                f"than to stepping the envs, so more processes would not make it faster (docs/distributed.md). "
                f"Instead, {faster}.")

    def build_config(self, hyperparameters: dict):
        # aliases first, so that an alias of a preset's name overrides the preset instead of clashing with it
        hyperparameters = canonical_names(self.config_class, hyperparameters)
        errors = {}
        if not self.several_processes and "processes" in hyperparameters:
            hyperparameters = dict(hyperparameters)
            try:
                self.check_one_process(hyperparameters.pop("processes"))
            except ConfigError as error:  # said with the others' errors, not instead of them
                errors.update(error.errors)
        try:
            config = build_config(self.config_class, {**dict(self.presets), **hyperparameters})
        except ConfigError as error:
            errors.update(error.errors)
        if errors:
            raise ConfigError(errors)
        return config

    def check_one_process(self, raw) -> None:
        """`processes` given to an algorithm that trains in one process: 1 is accepted (and not kept); more is refused
        with the reason."""
        try:
            processes = Param("processes", int, 1, "", low=1, high=MOST_PROCESSES).parse(raw)
        except ValueError as error:
            raise ConfigError({"processes": str(error)}) from None
        if processes != 1:
            raise ConfigError({"processes": self.one_process_reason()})

    def check_spaces(self, observation_space, action_space) -> None:
        errors = {}
        if space_name(action_space) not in self.action_spaces:
            errors["env_id"] = (f"{self.name} needs {' or '.join(self.action_spaces)} actions, but this environment "
                                f"has {space_name(action_space)} actions.")
        elif space_name(observation_space) not in self.observation_spaces:
            errors["env_id"] = (f"{self.name} supports {', '.join(self.observation_spaces)} observations, but this "
                                f"environment has {space_name(observation_space)} observations.")
        if errors:
            raise ConfigError(errors)


def _with_default(p: Param, default) -> Param:
    return Param(**{**p.__dict__, "default": default})


_REGISTRY: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    if spec.family not in FAMILIES:
        raise ValueError(f"{spec.name}: unknown family {spec.family!r}; one of {', '.join(FAMILIES)}")
    _REGISTRY[spec.name] = spec
    return spec


def algorithm_names() -> list[str]:
    return list(_REGISTRY)


def algorithms_by_family() -> list[tuple[str, list[AlgorithmSpec]]]:
    """The registered algorithms grouped by family, families in FAMILIES order, empty ones left out."""
    groups = [(family, [spec for spec in _REGISTRY.values() if spec.family == family]) for family in FAMILIES]
    return [(family, specs) for family, specs in groups if specs]


def get_spec(name: str) -> AlgorithmSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError({"algorithm": f"Unknown algorithm '{name}'. Known: {', '.join(_REGISTRY)}."}) from None


def validate(algorithm: str, env_id: str, hyperparameters: dict) -> dict:
    """Check an experiment before anything is queued; return the parsed hyperparameters.

    Raises ConfigError with every problem found, keyed by "algorithm", "env_id" or hyperparameter name.
    """
    spec = get_spec(algorithm)
    errors = {}
    config = None
    try:
        config = spec.build_config(hyperparameters)
    except ConfigError as error:
        errors.update(error.errors)
    try:
        observation_space, action_space = env_spaces(env_id)
        spec.check_spaces(observation_space, action_space)
        if spec.check_env is not None and config is not None:
            errors.update(spec.check_env(config, observation_space, action_space))
        if config is not None and not errors:  # bounded before anything is built or queued
            check_memory(spec, config, observation_space, action_space, env_id)
    except ConfigError as error:
        errors.update(error.errors)
    if errors:
        raise ConfigError(errors)
    values = dict(config.__dict__)
    if not spec.several_processes:
        values["processes"] = 1  # a value for each of its params, as the form shows them
    return values
