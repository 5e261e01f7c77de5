"""Running normalisation statistics, and their round trip through a checkpoint."""

import json

import numpy as np
import pytest

import trainer
from trainer.normalization import ObservationNormalizer, RewardNormalizer, RunningMeanStd


def test_running_mean_std_merges_batches_like_one_big_batch():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 2))
    stats = RunningMeanStd((2,), epsilon=0.0)
    for chunk in np.array_split(data, 7):
        stats.update(chunk)
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-10)
    assert stats.count == 1000


def test_observation_normalizer_is_frozen_unless_asked_to_update():
    normalizer = ObservationNormalizer((1,), clip=5.0)
    normalizer.normalize(np.array([[0.0], [2.0]]), update=True)
    before = normalizer.state_dict()
    out = normalizer.normalize(np.array([[1.0], [100.0]]))
    assert normalizer.state_dict() == before
    assert out[0, 0] == pytest.approx(0.0, abs=1e-3) and out[1, 0] == 5.0  # centred, then clipped


def test_reward_normalizer_scales_by_the_discounted_return_and_restarts_it_at_episode_ends():
    normalizer = RewardNormalizer(num_envs=2, gamma=0.5)
    normalizer.normalize(np.array([1.0, 1.0]), np.array([False, True]))
    np.testing.assert_allclose(normalizer.returns, [1.0, 0.0])
    normalizer.normalize(np.array([1.0, 1.0]), np.array([False, False]))
    np.testing.assert_allclose(normalizer.returns, [1.5, 1.0])


def test_statistics_survive_json():
    normalizer = ObservationNormalizer((3,))
    normalizer.update(np.random.default_rng(1).normal(size=(50, 3)) * 1e3)
    copy = ObservationNormalizer((3,))
    copy.load_state_dict(json.loads(json.dumps(normalizer.state_dict())))
    x = np.random.default_rng(2).normal(size=(4, 3)) * 1e3
    np.testing.assert_array_equal(copy.normalize(x), normalizer.normalize(x))


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_normalisation_statistics_round_trip_through_a_checkpoint(algorithm, tmp_path):
    agent = trainer.make(algorithm, "Pendulum-v1", seed=0, num_envs=2, n_steps=16, normalize_observations=True,
                         normalize_rewards=True, hidden_layers="16", **({"batch_size": 32} if algorithm == "ppo"
                                                                         else {}))
    agent.learn(64, eval_episodes=0)
    assert agent.obs_normalizer.stats.count > 64  # it learned statistics
    loaded = trainer.load(agent.save(tmp_path / "agent.zip"))
    assert loaded.obs_normalizer.state_dict() == agent.obs_normalizer.state_dict()
    assert loaded.reward_normalizer.state_dict() == agent.reward_normalizer.state_dict()
    observations = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32) * 5
    np.testing.assert_array_equal(loaded.act(observations, True), agent.act(observations, True))
    # evaluation does not move the statistics
    loaded.evaluate(1)
    assert loaded.obs_normalizer.state_dict() == agent.obs_normalizer.state_dict()
