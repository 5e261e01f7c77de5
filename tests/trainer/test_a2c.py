import numpy as np
import pytest
import torch

import trainer
from trainer.algorithms.a2c import A2CConfig
from trainer.params import build_config

from tests.trainer.policy_gradient_checks import (ACTION_ENVS, OBSERVATION_ENVS, same_seed_gives_identical_metrics,
                                                  trains_saves_loads_and_evaluates)

TINY = dict(num_envs=2, n_steps=5, hidden_layers="16")


def test_defaults_are_sb3s():
    config = build_config(A2CConfig, {})
    assert (config.num_envs, config.n_steps, config.gamma, config.policy_learning_rate, config.critic_learning_rate) == (8, 5, 0.99, 7e-4, 7e-4)
    assert (config.value_coef, config.entropy_coef, config.max_grad_norm) == (0.5, 0.0, 0.5)
    assert config.optimizer == "rmsprop" and not config.normalize_advantage


@pytest.mark.parametrize("env_id", OBSERVATION_ENVS + ACTION_ENVS)
def test_a2c_trains_saves_loads_and_evaluates_on_every_space(env_id, tmp_path):
    trains_saves_loads_and_evaluates("a2c", env_id, TINY, tmp_path, steps=200)


@pytest.mark.parametrize("options", [dict(shared_network=True, optimizer="rmsprop_tf"),
                                     dict(optimizer="adam", normalize_advantage=True, lr_schedule="linear")])
def test_a2c_variants_train_and_reload(options, tmp_path):
    trains_saves_loads_and_evaluates("a2c", "CartPole-v1", {**TINY, **options}, tmp_path, steps=200)


def test_the_same_seed_gives_identical_metrics():
    same_seed_gives_identical_metrics("a2c", "CartPole-v1", TINY)


def test_policy_and_value_learn_at_their_own_rates():
    agent = trainer.make("a2c", "CartPole-v1", seed=0, **{**TINY, "policy_learning_rate": 1e-4, "critic_learning_rate": 5e-3})
    assert [group["lr"] for group in agent.optimizer.param_groups] == [1e-4, 5e-3]
    actor = [p.detach().clone() for p in agent.network.actor_parameters()]
    critic = [p.detach().clone() for p in agent.network.critic_parameters()]
    agent.learn(10, eval_episodes=0)
    actor_move = max((p - q).abs().max().item() for p, q in zip(agent.network.actor_parameters(), actor))
    critic_move = max((p - q).abs().max().item() for p, q in zip(agent.network.critic_parameters(), critic))
    assert 0 < actor_move < critic_move


def test_one_update_is_one_full_batch_gradient_step_on_n_step_returns():
    agent = trainer.make("a2c", "CartPole-v1", seed=0, **TINY)
    steps = []
    original = agent.optimizer.step
    agent.optimizer.step = lambda *a, **k: steps.append(agent.steps_done) or original(*a, **k)
    agent.learn(40, eval_episodes=0)
    assert steps == [10, 20, 30, 40]  # every n_steps x num_envs env steps


def test_a2c_takes_the_same_gradient_as_ppo_with_one_full_batch_epoch():
    """docs/algorithms.md's cross-check (A2C): A2C is PPO with one epoch over the whole rollout (the ratio is then 1,
    so clipping does nothing) and lambda = 1 (GAE's returns are the n-step returns)."""
    from trainer.envs import make_vector_env
    from trainer.runner import Runner

    settings = dict(num_envs=2, n_steps=8, hidden_layers="16", gamma=0.9, max_grad_norm=0.5)
    a2c = trainer.make("a2c", "CartPole-v1", seed=0, value_coef=0.5, entropy_coef=0.0, **settings)
    ppo = trainer.make("ppo", "CartPole-v1", seed=1, batch_size=16, n_epochs=1, gae_lambda=1.0, value_coef=0.5,
                       entropy_coef=0.0, normalize_advantage=False, **settings)
    ppo.network.load_state_dict(a2c.network.state_dict())
    runner = Runner(a2c, end_step=10_000)
    runner._started = runner._next_time_event = runner._next_stop_poll = 0.0
    runner._last_time_event = (0.0, 0)
    envs = make_vector_env("CartPole-v1", 2, seed=0)
    buffer = a2c.new_buffer(8, 2)
    observations, _ = envs.reset(seed=0)
    _, last_values, _ = a2c.collect(runner, envs, buffer, observations)
    envs.close()
    for agent in (a2c, ppo):
        agent.optimizer.step = lambda *args, **kwargs: None  # keep the gradients, move nothing
    buffer.compute_n_step_returns(last_values[:, 0], 0.9)
    a2c.update(buffer, 0.0)
    buffer.compute_advantages(last_values[:, 0], 0.9, 1.0)
    ppo.update(buffer, 0.0)
    for mine, theirs in zip(a2c.network.parameters(), ppo.network.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-6)
    assert any(p.grad.abs().sum() > 0 for p in a2c.network.parameters())


def test_categorical_rollouts_act_through_numpy_with_the_same_draws_as_torch():
    agent = trainer.make("a2c", "CartPole-v1", seed=0)
    assert agent.numpy_policy is not None
    with torch.no_grad():
        agent.network.policy.linear.weight.mul_(100)  # confident, differing logits, not near-uniform ones
    observations = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    torch.manual_seed(1)
    ours = agent.rollout_actions(observations)
    torch.manual_seed(1)
    with torch.no_grad():
        theirs = agent.network.distribution(torch.as_tensor(observations)).sample().numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert 0 < ours.mean() < 1
    assert trainer.make("a2c", "Pendulum-v1").numpy_policy is None  # Gaussian policies sample with torch
    assert trainer.make("ppo", "CartPole-v1").numpy_policy is not None  # PPO too (1.15x in whole runs)
