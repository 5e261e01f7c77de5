import numpy as np
import pytest
import torch

import trainer
from trainer.buffers import Episode

from tests.trainer.policy_gradient_checks import (ACTION_ENVS, OBSERVATION_ENVS, same_seed_gives_identical_metrics,
                                                  trains_saves_loads_and_evaluates)

TINY = dict(num_envs=2, episodes_per_batch=2, hidden_layers="16", value_steps=2)


@pytest.mark.parametrize("env_id", OBSERVATION_ENVS + ACTION_ENVS)
def test_vpg_trains_saves_loads_and_evaluates_on_every_space(env_id, tmp_path):
    trains_saves_loads_and_evaluates("vpg", env_id, TINY, tmp_path, steps=200)


@pytest.mark.parametrize("baseline", ["mean", "none"])
def test_vpg_trains_with_the_other_baselines(baseline, tmp_path):
    trains_saves_loads_and_evaluates("vpg", "CartPole-v1", {**TINY, "baseline": baseline}, tmp_path, steps=200)


def test_the_same_seed_gives_identical_metrics():
    same_seed_gives_identical_metrics("vpg", "CartPole-v1", TINY)


def two_episodes():
    return [Episode(np.array([[0.0], [1.0]], np.float32), np.array([1, 1]), np.array([0.0, 1.0], np.float32), True,
                    np.array([2.0], np.float32)),
            Episode(np.array([[0.0]], np.float32), np.array([0]), np.array([2.0], np.float32), False,
                    np.array([3.0], np.float32))]


def test_a_truncated_episode_is_bootstrapped_from_the_value_of_its_last_observation():
    agent = trainer.make("vpg", "rlweb-test/Corridor-box-v0", seed=0, gamma=0.5, **TINY)
    with torch.no_grad():
        v_last = agent.network.values(torch.tensor([[3.0]]))[0, 0].item()
    returns = agent.returns(two_episodes())
    # the terminated episode is not bootstrapped; the truncated one adds gamma * V(last observation)
    np.testing.assert_allclose(returns, [0.5, 1.0, 2.0 + 0.5 * v_last], rtol=1e-6)


def test_the_policy_loss_uses_a_detached_baseline_and_subtracts_the_entropy_bonus():
    agent = trainer.make("vpg", "rlweb-test/Corridor-box-v0", seed=0, gamma=0.5, entropy_coef=0.1,
                         normalize_advantage=False, **TINY)
    obs = torch.tensor([[0.0], [1.0], [0.0]])
    with torch.no_grad():
        distribution = agent.network.distribution(obs)
        log_probs = distribution.log_prob(torch.tensor([1, 1, 0]))
        entropy = distribution.entropy().mean()
        returns = torch.as_tensor(agent.returns(two_episodes()))
        advantages = returns - agent.network.values(obs)[:, 0]
    critic = [p.detach().clone() for p in agent.network.critic_parameters()]
    value_optimizer = agent.value_optimizer
    agent.value_optimizer = None  # the policy step alone must not move the critic
    agent.config.baseline = "value"
    agent.config.value_steps = 1
    try:
        agent.update(two_episodes())
    except AttributeError:  # the value step comes after the policy step
        pass
    agent.value_optimizer = value_optimizer
    for p, q in zip(agent.network.critic_parameters(), critic):
        torch.testing.assert_close(p.detach(), q)
    expected = -(log_probs * advantages).mean() - 0.1 * entropy
    agent2 = trainer.make("vpg", "rlweb-test/Corridor-box-v0", seed=0, gamma=0.5, entropy_coef=0.1,
                          normalize_advantage=False, **TINY)
    assert agent2.update(two_episodes())["train/loss"] == pytest.approx(expected.item(), rel=1e-5)
