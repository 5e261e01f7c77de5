import numpy as np
import pytest
import torch

import trainer
from trainer.buffers import Episode

from tests.trainer.policy_gradient_checks import (ACTION_ENVS, OBSERVATION_ENVS, same_seed_gives_identical_metrics,
                                                  trains_saves_loads_and_evaluates)

TINY = dict(num_envs=2, episodes_per_batch=2, hidden_layers="16")


@pytest.mark.parametrize("env_id", OBSERVATION_ENVS + ACTION_ENVS)
def test_reinforce_trains_saves_loads_and_evaluates_on_every_space(env_id, tmp_path):
    trains_saves_loads_and_evaluates("reinforce", env_id, TINY, tmp_path, steps=200)


def test_the_same_seed_gives_identical_metrics():
    same_seed_gives_identical_metrics("reinforce", "CartPole-v1", TINY)


@pytest.mark.parametrize("normalize_batch_returns", [True, False])
def test_the_loss_is_minus_log_prob_times_the_per_episode_reward_to_go(normalize_batch_returns):
    agent = trainer.make("reinforce", "rlweb-test/Corridor-box-v0", seed=0, gamma=0.5,
                         normalize_batch_returns=normalize_batch_returns, **TINY)
    episodes = [Episode(np.array([[0.0], [1.0]], np.float32), np.array([1, 1]), np.array([0.0, 1.0], np.float32),
                        True, np.array([2.0])),
                Episode(np.array([[0.0]], np.float32), np.array([0]), np.array([2.0], np.float32), False,
                        np.array([0.0]))]
    returns = torch.tensor([0.5, 1.0, 2.0])  # reward-to-go within each episode, nothing across their boundary
    if normalize_batch_returns:
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    with torch.no_grad():
        log_probs = agent.network.distribution(torch.tensor([[0.0], [1.0], [0.0]])).log_prob(torch.tensor([1, 1, 0]))
    metrics = agent.update(episodes)
    assert metrics["train/loss"] == pytest.approx(-(log_probs * returns).mean().item(), rel=1e-5)


def test_batches_hold_only_whole_episodes():
    agent = trainer.make("reinforce", "CartPole-v1", seed=0, **TINY)
    batches = []
    original = agent.update
    agent.update = lambda episodes, *rest: batches.append(episodes) or original(episodes, *rest)
    agent.learn(500, eval_episodes=0)
    assert batches
    for episodes in batches:
        assert len(episodes) >= 2
        for episode in episodes:
            # a whole CartPole episode ends in a fall (terminated) or at the time limit, never in between
            assert episode.terminated or len(episode.rewards) == 500
