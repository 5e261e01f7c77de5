"""rlweb's reinforcement-learning library: plain PyTorch + Gymnasium, no Django, Celery or Redis.

    agent = trainer.make("dqn", "CartPole-v1", seed=0, learning_rate=1e-3)
    agent.learn(50_000)
    agent.save("final.zip")
    agent = trainer.load("final.zip")
    agent.predict(observation); agent.evaluate(episodes=10)

Importing the package does not import PyTorch: the web server, beat and the shell read the algorithms' names,
schemas and presets through it, and PyTorch (about 2 s and 300 MB for each process) comes in with the first
algorithm module, checkpoint or training run a process asks for.
"""

import operator

from trainer import presets  # noqa: F401  (trainer.presets.find, listing)
from trainer.params import ConfigError, canonical_names
from trainer.presets import resolve as resolve_preset
from trainer.registry import (algorithm_names, algorithms_by_family, broken_algorithms, get_spec, missing_plugin,
                              origin, validate)
from trainer.version import __version__


def __getattr__(name: str):
    """`trainer.load`, `trainer.CheckpointError` and `trainer.TrainingError`, imported (with PyTorch) on first use."""
    if name in ("load", "CheckpointError"):
        from trainer import checkpoint

        return checkpoint.load_checkpoint if name == "load" else checkpoint.CheckpointError
    if name == "TrainingError":
        from trainer.runner import TrainingError

        return TrainingError
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")


def make(algorithm: str, env_id: str, seed: int = 0, device: str = "auto", preset: str | None = None,
         **hyperparameters):
    """An untrained agent; hyperparameters are checked against the algorithm's schema first. `preset="auto"`
    starts from the settings tuned for this environment (trainer/presets.py), or a preset's name from
    `trainer.presets.listing(algorithm)`; the hyperparameters given go on top. None: the plain defaults."""
    required = hyperparameters.pop("plugin", None)  # the package a plugin's run was made with (trainer.validate)
    problem = missing_plugin(algorithm, required) if required else None
    if problem:  # fails at once, naming the package, instead of training something else
        from trainer.runner import TrainingError

        raise TrainingError(f"This worker cannot train the run: {problem}.")
    spec = get_spec(algorithm)
    chosen = resolve_preset(algorithm, env_id, preset)
    if chosen is not None:
        hyperparameters = {**chosen.values, **canonical_names(spec.config_class, hyperparameters)}
    try:
        seed = operator.index(seed)  # ints, NumPy ints
    except TypeError:
        seed = -1
    if not 0 <= seed < 2**63:
        raise ConfigError({"seed": "must be a whole number from 0 to 2^63 - 1"})
    validate(algorithm, env_id, hyperparameters)
    agent = spec.agent_class(env_id, spec.build_config(hyperparameters), seed=seed, device=device)
    agent.name = spec.name  # variants share a class: the instance keeps the name it was made with
    agent.preset = chosen.name if chosen is not None else None
    return agent


__all__ = ["make", "load", "validate", "algorithm_names", "algorithms_by_family", "get_spec", "origin",
           "broken_algorithms", "ConfigError",
           "CheckpointError", "TrainingError"]
