"""Box2D environments (gymnasium[box2d]) train with a discrete and a continuous algorithm."""

import math

import pytest

import trainer


@pytest.mark.parametrize("algorithm, env_id, options", [
    ("dqn", "LunarLander-v3", dict(learning_starts=100, batch_size=16, buffer_size=1000, train_frequency=4,
                                   gradient_steps=1, hidden_layers="16,16")),
    ("ppo", "LunarLander-v3", dict(num_envs=2, n_steps=64, batch_size=64, n_epochs=1, hidden_layers="16")),
    ("sac", "LunarLanderContinuous-v3", dict(learning_starts=100, batch_size=16, buffer_size=1000,
                                             hidden_layers="16,16")),
])
def test_lunar_lander_trains_saves_loads_and_evaluates(algorithm, env_id, options, tmp_path):
    agent = trainer.make(algorithm, env_id, seed=0, **options)
    assert agent.learn(400, checkpoint_dir=tmp_path, eval_episodes=0)["steps"] == 400
    loaded = trainer.load(tmp_path / "final.zip")
    assert math.isfinite(loaded.evaluate(1)["mean"])
