"""The example plugin, through rlweb's trainer as a user reaches it: by name, after `pip install -e .`."""

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import trainer
from rlweb_example_plugin.corridor import Corridor
from rlweb_example_plugin.soft_dqn import SoftDQN
from trainer.envs import make_env

ENV = "rlweb-example/Corridor-v0"
TINY = {"learning_starts": 20, "batch_size": 8, "buffer_size": 200, "hidden_layers": "16"}


def test_rlweb_finds_the_algorithm_and_says_where_it_comes_from():
    assert "soft-dqn" in trainer.algorithm_names()
    assert trainer.origin("soft-dqn").package == "rlweb-example-plugin"


def test_the_corridor_passes_gymnasiums_checks_and_is_registered():
    check_env(Corridor(), skip_render_check=True)
    env = make_env(ENV)  # trainer registers the ids of the gymnasium.envs entry points
    observation, _ = env.reset(seed=0)
    for _ in range(7):
        observation, reward, terminated, truncated, _ = env.step(1)
    assert terminated and reward == 1.0 and observation.argmax() == 7


def test_the_soft_target_is_the_temperature_weighted_logsumexp():
    agent = trainer.make("soft-dqn", ENV, temperature=0.5, **TINY)
    batch = type("Batch", (), {})()
    batch.next_obs = torch.eye(8)[:2]
    batch.rewards, batch.discounts, batch.terminated = torch.tensor([1.0, 0.0]), torch.tensor([0.9, 0.9]), \
        torch.tensor([0.0, 1.0])
    q = agent.target_network(batch.next_obs).detach()
    expected = torch.tensor([1.0 + 0.9 * 0.5 * torch.logsumexp(q[0] / 0.5, 0), 0.0])  # no bootstrap past the end
    assert torch.allclose(SoftDQN.targets(agent, batch), expected)


def test_the_same_seed_twice_gives_the_same_metrics():
    returns = []
    for _ in range(2):
        agent = trainer.make("soft-dqn", ENV, seed=5, **TINY)
        agent.learn(200, eval_interval=100, eval_episodes=2)
        returns.append(agent.evaluate(episodes=2, seed=0)["returns"])
    assert returns[0] == returns[1]


def test_save_then_load_gives_the_same_actions(tmp_path):
    agent = trainer.make("soft-dqn", ENV, seed=1, **TINY)
    agent.learn(100)
    loaded = trainer.load(agent.save(tmp_path / "agent.zip"))
    observations = np.eye(8, dtype=np.float32)
    assert [loaded.predict(o) for o in observations] == [agent.predict(o) for o in observations]


@pytest.mark.slow
def test_it_learns_to_walk_the_corridor():
    agent = trainer.make("soft-dqn", ENV, seed=0)
    agent.learn(4_000)
    assert agent.evaluate(episodes=5)["mean"] > 0.9
