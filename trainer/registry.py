"""The algorithm registry: each algorithm's name, family, description, config schema and agent class.

Every algorithm, built-in or not, comes from an entry point of the group `rlweb.algorithms` that an installed
package declares (rlweb's own pyproject.toml declares the built-in ones): its name is the algorithm's, and it
points to an `AlgorithmSpec`. `discover()` reads them with importlib.metadata the first time anything asks, once
per process. One that raises on import or declares a config that cannot be built is kept aside as broken, with
its error, and the others work as before (docs/plugins.md).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

from trainer.envs import chosen_vectorization, env_spaces, space_name
from trainer.params import MOST_PROCESSES, ConfigError, Param, build_config, canonical_names, schema
from trainer.version import __version__

# The families algorithms are grouped by (the web form's <optgroup>s, `python -m trainer list`), in order
DQN_FAMILY = "DQN family"
POLICY_GRADIENT = "Policy gradient"
CONTINUOUS_CONTROL = "Continuous control"
CLASSIC = "Classic"
FAMILIES = (DQN_FAMILY, POLICY_GRADIENT, CONTINUOUS_CONTROL, CLASSIC)  # a plugin's algorithm picks one too

ENTRY_POINT_GROUP = "rlweb.algorithms"
BUILTIN_PACKAGE = "rlweb"


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
        hyperparameters = canonical_names(self.config_class, without_plugin(hyperparameters))
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


def without_plugin(hyperparameters: dict) -> dict:
    """The hyperparameters without "plugin", the package a plugin's run needs (`requirement`), which is no field."""
    return {key: value for key, value in hyperparameters.items() if key != "plugin"}


def _with_default(p: Param, default) -> Param:
    return Param(**{**p.__dict__, "default": default})


@dataclass(frozen=True)
class Origin:
    """The installed package an algorithm comes from."""

    package: str
    version: str

    def __str__(self) -> str:
        return f"{self.package} {self.version}"

    @property
    def builtin(self) -> bool:
        return self.package == BUILTIN_PACKAGE

    @property
    def major(self) -> str:
        return self.version.split(".")[0]


@dataclass(frozen=True)
class BrokenAlgorithm:
    """An entry point that gave no usable algorithm, and why."""

    name: str
    origin: Origin
    error: str


_REGISTRY: dict[str, AlgorithmSpec] = {}
_ORIGINS: dict[str, Origin] = {}
_BROKEN: dict[str, BrokenAlgorithm] = {}
_discovered = threading.Event()
_discovering = threading.RLock()
_loading = False  # set while this process loads the entry points


def algorithm_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed packages' `rlweb.algorithms` entry points. When rlweb itself is not installed (a source checkout
    run in place), the ones its pyproject.toml declares come first, read as entry points too."""
    found = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    if any(origin_of(entry_point).builtin for entry_point in found):
        return found
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
        declared = project["entry-points"][ENTRY_POINT_GROUP] if project["name"] == BUILTIN_PACKAGE else {}
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        declared = {}
    return [importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in declared.items()] + found


def origin_of(entry_point: importlib.metadata.EntryPoint) -> Origin:
    if entry_point.dist is None:  # read from rlweb's own pyproject.toml
        return Origin(BUILTIN_PACKAGE, __version__)
    return Origin(entry_point.dist.name, entry_point.dist.version)


def discover() -> None:
    """Load every algorithm entry point, once per process (`rediscover()` reads them again)."""
    global _loading
    if _discovered.is_set():
        return
    with _discovering:
        if _discovered.is_set() or _loading:  # asked again by a plugin's import: what is loaded so far
            return
        _loading = True
        try:
            load_entry_points()
        finally:
            _loading = False
        _discovered.set()


def load_entry_points() -> None:
    """Each entry point's spec into the registry, or into the broken ones with its error."""
    for entry_point in algorithm_entry_points():
        origin = origin_of(entry_point)
        try:
            spec = entry_point.load()
            check_spec(entry_point.name, spec)
        except Exception as error:  # a plugin's code: whatever it raises, the other algorithms stay usable
            _BROKEN[entry_point.name] = BrokenAlgorithm(entry_point.name, origin, f"{type(error).__name__}: {error}")
            continue
        if entry_point.name in _REGISTRY:
            _BROKEN[entry_point.name] = BrokenAlgorithm(
                entry_point.name, origin, f"the name is taken by {_ORIGINS[entry_point.name]}")
            continue
        add(spec, origin)


def register(spec: AlgorithmSpec, origin: Origin = Origin(BUILTIN_PACKAGE, __version__)) -> AlgorithmSpec:
    """Add a spec to this process's registry, beside the discovered ones (tests, notebooks); installed algorithms come
    through their entry points instead."""
    discover()
    return add(spec, origin)


def add(spec: AlgorithmSpec, origin: Origin) -> AlgorithmSpec:
    if spec.family not in FAMILIES:
        raise ValueError(f"{spec.name}: unknown family {spec.family!r}; one of {', '.join(FAMILIES)}")
    _REGISTRY[spec.name] = spec
    _ORIGINS[spec.name] = origin
    return spec


def rediscover() -> None:
    """Forget what was loaded and read the entry points again (after a package was installed or removed)."""
    with _discovering:
        _REGISTRY.clear(), _ORIGINS.clear(), _BROKEN.clear()
        importlib.invalidate_caches()
        _discovered.clear()
    discover()


def check_spec(name: str, spec) -> None:
    """Refuse what an entry point gives unless the form, the CLI and the runner can use it as they use ours."""
    if not isinstance(spec, AlgorithmSpec):
        raise TypeError(f"the entry point gives a {type(spec).__name__}, not a trainer.registry.AlgorithmSpec")
    if spec.name != name:
        raise ValueError(f"the entry point is named {name!r} but its spec {spec.name!r}")
    if not (isinstance(spec.agent_class, type) and "trainer.agent.Agent" in {  # (trainer.agent imports this module)
            f"{base.__module__}.{base.__qualname__}" for base in spec.agent_class.__mro__}):
        raise TypeError("agent_class must be a subclass of trainer.agent.Agent")
    if not dataclasses.is_dataclass(spec.config_class):
        raise TypeError("config_class must be a dataclass whose fields are declared with trainer.params.param")
    if spec.family not in FAMILIES:
        raise ValueError(f"unknown family {spec.family!r}; one of {', '.join(FAMILIES)}")
    if not spec.observation_spaces or not spec.action_spaces:
        raise ValueError("observation_spaces and action_spaces must not be empty")
    for declared in spec.params():  # each field declared with trainer.params.param, its default within its bounds
        if not declared.help:
            raise TypeError(f"config field {declared.name!r} is not declared with trainer.params.param(default, help)")
        try:
            declared.parse(declared.default)
        except ValueError as error:
            raise ValueError(f"the default of config field {declared.name!r} is refused by its own bounds: {error}")
    spec.build_config({})  # the defaults together must make a valid config


def algorithm_names() -> list[str]:
    discover()
    return list(_REGISTRY)


def algorithms_by_family() -> list[tuple[str, list[AlgorithmSpec]]]:
    """The registered algorithms grouped by family, families in FAMILIES order, empty ones left out."""
    discover()
    groups = [(family, [spec for spec in _REGISTRY.values() if spec.family == family]) for family in FAMILIES]
    return [(family, specs) for family, specs in groups if specs]


def broken_algorithms() -> list[BrokenAlgorithm]:
    discover()
    return list(_BROKEN.values())


def origin(name: str) -> Origin:
    """The package (and version) algorithm `name` comes from."""
    get_spec(name)
    return _ORIGINS[name]


def get_spec(name: str) -> AlgorithmSpec:
    discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        broken = f" It is broken: {_BROKEN[name].origin}: {_BROKEN[name].error}" if name in _BROKEN else ""
        raise ConfigError({"algorithm": f"Unknown algorithm '{name}'.{broken} Known: {', '.join(_REGISTRY)}."}) from None


def requirement(name: str) -> str | None:
    """What a run of a plugin's algorithm needs installed where it trains ("package version"); None for ours."""
    found = origin(name)
    return None if found.builtin else str(found)


def missing_plugin(name: str, required: str, exact: bool = True) -> str | None:
    """Why `required` ("package version", as `requirement` gave it where the run was made) is not satisfied here for
    algorithm `name`; None when it is. `exact`: the same version (a run), else the same major version (a
    checkpoint)."""
    package, _, version = str(required).partition(" ")
    discover()
    here = _ORIGINS.get(name)
    if here is None:
        broken = f" (it is broken here: {_BROKEN[name].error})" if name in _BROKEN else ""
        return f"{name} comes from the package {package} {version}, which is not installed here{broken}"
    if here.package != package:
        return f"{name} came from the package {package} {version}, but here it comes from {here}"
    if exact and here.version != version:
        return f"{name} needs the package {package} {version}, but {here} is installed here"
    if not exact and here.major != version.split(".")[0]:
        return (f"{name} needs the package {package} {version.split('.')[0]}.x (it was saved with {version}), but "
                f"{here} is installed here, a different major version")
    return None


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
        if config is not None and hasattr(config, "vectorization"):  # ale steps only Atari ids
            chosen_vectorization(env_id, config.vectorization)
        if config is not None and not errors:  # bounded before anything is built or queued
            from trainer.resources import check_memory  # builds the agent on PyTorch's meta device

            check_memory(spec, config, observation_space, action_space, env_id)
    except ConfigError as error:
        errors.update(error.errors)
    if errors:
        raise ConfigError(errors)
    values = dict(config.__dict__)
    if not spec.several_processes:
        values["processes"] = 1  # a value for each of its params, as the form shows them
    if requirement(algorithm):  # checked where the run trains (trainer.make)
        values["plugin"] = requirement(algorithm)
    return values
