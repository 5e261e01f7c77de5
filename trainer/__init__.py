"""rlweb's reinforcement-learning library: plain PyTorch + Gymnasium, no Django, Celery or Redis.

    agent = trainer.make("dqn", "CartPole-v1", seed=0, learning_rate=1e-3)
    agent.learn(50_000)
    agent.save("final.zip")
    agent = trainer.load("final.zip")
    agent.predict(observation); agent.evaluate(episodes=10)
"""

__version__ = "0.1.0"

from trainer.checkpoint import CheckpointError, load_checkpoint as load  # noqa: E402
from trainer.params import ConfigError  # noqa: E402
from trainer.registry import algorithm_names, algorithms_by_family, get_spec, validate  # noqa: E402


def make(algorithm: str, env_id: str, seed: int = 0, device: str = "auto", **hyperparameters):
    """An untrained agent; hyperparameters are checked against the algorithm's schema first."""
    spec = get_spec(algorithm)
    validate(algorithm, env_id, hyperparameters)
    agent = spec.agent_class(env_id, spec.build_config(hyperparameters), seed=seed, device=device)
    agent.name = spec.name  # presets share a class: the instance keeps the name it was made with
    return agent


__all__ = ["make", "load", "validate", "algorithm_names", "algorithms_by_family", "get_spec", "ConfigError",
           "CheckpointError"]
