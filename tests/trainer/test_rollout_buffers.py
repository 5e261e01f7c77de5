"""GAE, n-step and Monte-Carlo returns against slow references; the rollout and episode buffers."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trainer
from trainer.buffers import (EpisodeBuffer, RolloutBuffer, discounted_returns, generalized_advantages,
                             n_step_returns)

from tests.trainer import envs_for_tests  # noqa: F401  (registers the corridor envs)


def slow_gae(rewards, values, next_values, terminated, episode_ends, gamma, lam):
    """Sum_k (gamma lambda)^k delta_{t+k}, walking forward from each step until its episode or the rollout ends."""
    steps, envs = rewards.shape
    advantages = np.zeros((steps, envs))
    for env in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                bootstrap = 0.0 if terminated[k, env] else next_values[k, env]
                delta = rewards[k, env] + gamma * bootstrap - values[k, env]
                total += weight * delta
                if episode_ends[k, env]:
                    break
                weight *= gamma * lam
            advantages[t, env] = total
    return advantages


def slow_n_step(rewards, next_values, terminated, episode_ends, gamma):
    """r_t + gamma r_{t+1} + ... up to the episode's or rollout's end, then gamma^n V of the state after it
    (zero after a terminal state)."""
    steps, envs = rewards.shape
    returns = np.zeros((steps, envs))
    for env in range(envs):
        for t in range(steps):
            total, discount = 0.0, 1.0
            for k in range(t, steps):
                total += discount * rewards[k, env]
                discount *= gamma
                if episode_ends[k, env] or k == steps - 1:
                    total += 0.0 if terminated[k, env] else discount * next_values[k, env]
                    break
            returns[t, env] = total
    return returns


def random_rollout(seed, steps, envs, end_probability):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    next_values = rng.normal(size=(steps, envs)).astype(np.float32)
    ends = rng.random((steps, envs)) < end_probability
    terminated = ends & (rng.random((steps, envs)) < 0.5)  # the other ends are time-limit truncations
    # inside an episode the next state is the next step's state; after an end it is the episode's last one
    next_values[:-1] = np.where(ends[:-1], next_values[:-1], values[1:])
    return rewards, values, next_values, terminated.astype(np.float32), ends.astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 12), envs=st.integers(1, 4),
       end_probability=st.sampled_from([0.0, 0.2, 0.6]), gamma=st.sampled_from([0.0, 0.9, 0.99, 1.0]),
       lam=st.sampled_from([0.0, 0.8, 0.95, 1.0]))
def test_gae_matches_a_slow_reference_with_terminations_and_truncations(seed, steps, envs, end_probability, gamma,
                                                                         lam):
    rewards, values, next_values, terminated, ends = random_rollout(seed, steps, envs, end_probability)
    advantages, returns = generalized_advantages(rewards, values, next_values, terminated, ends, gamma, lam)
    expected = slow_gae(rewards, values, next_values, terminated, ends, gamma, lam)
    np.testing.assert_allclose(advantages, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(returns, expected + values, rtol=1e-4, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 12), envs=st.integers(1, 4),
       end_probability=st.sampled_from([0.0, 0.2, 0.6]), gamma=st.sampled_from([0.0, 0.9, 0.99, 1.0]))
def test_n_step_returns_match_a_slow_reference_and_gae_with_lambda_one(seed, steps, envs, end_probability, gamma):
    rewards, values, next_values, terminated, ends = random_rollout(seed, steps, envs, end_probability)
    returns = n_step_returns(rewards, next_values, terminated, ends, gamma)
    np.testing.assert_allclose(returns, slow_n_step(rewards, next_values, terminated, ends, gamma), rtol=1e-4,
                               atol=1e-4)
    _, gae_returns = generalized_advantages(rewards, values, next_values, terminated, ends, gamma, 1.0)
    np.testing.assert_allclose(returns, gae_returns, rtol=1e-4, atol=1e-4)


def test_gae_on_hand_worked_numbers():
    # one env, three steps; the episode is truncated at t=1 (bootstrapped from V(final obs) = 10)
    rewards = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    values = np.array([[0.5], [1.0], [1.5]], dtype=np.float32)
    next_values = np.array([[1.0], [10.0], [4.0]], dtype=np.float32)
    terminated = np.zeros((3, 1), dtype=np.float32)
    ends = np.array([[0.0], [1.0], [0.0]], dtype=np.float32)
    advantages, _ = generalized_advantages(rewards, values, next_values, terminated, ends, gamma=0.5, gae_lambda=0.5)
    delta = [1 + 0.5 * 1.0 - 0.5, 2 + 0.5 * 10.0 - 1.0, 3 + 0.5 * 4.0 - 1.5]  # 1.0, 6.0, 3.5
    np.testing.assert_allclose(advantages[:, 0], [delta[0] + 0.25 * delta[1], delta[1], delta[2]])
    # the same step terminated instead: no bootstrap
    terminated[1] = 1.0
    advantages, _ = generalized_advantages(rewards, values, next_values, terminated, ends, gamma=0.5, gae_lambda=0.5)
    assert advantages[1, 0] == pytest.approx(2.0 - 1.0)


def test_discounted_returns_are_the_reward_to_go_of_one_episode():
    np.testing.assert_allclose(discounted_returns([1.0, 1.0, 1.0], 0.5), [1.75, 1.5, 1.0])
    np.testing.assert_allclose(discounted_returns([1.0, 1.0], 0.5, bootstrap=4.0), [2.5, 3.0])


def test_rollout_buffer_bootstraps_from_the_final_value_only_where_an_episode_ended():
    buffer = RolloutBuffer(3, 2, (1,), np.float32)
    for t in range(3):
        truncated = np.array([t == 1, False])
        terminated = np.array([False, t == 0])
        buffer.add(np.zeros((2, 1)), np.zeros(2), np.ones(2), terminated, truncated)
        if t == 1:
            buffer.set_final_values(np.array([0]), np.array([7.0]))
    buffer.set_values(np.zeros(6), np.repeat(np.arange(3.0), 2)[:, None])  # V(s_t) = t
    next_values = buffer.next_values(buffer.values, np.array([9.0, 9.0]))
    # env 0: V(s_1), then the truncation's own final value, then the last values; env 1 ends at t=0 (terminal)
    np.testing.assert_allclose(next_values[:, 0], [1.0, 7.0, 9.0])
    np.testing.assert_allclose(next_values[:, 1], [0.0, 2.0, 9.0])


def test_minibatches_cover_the_rollout_once_in_random_order():
    buffer = RolloutBuffer(4, 3, (1,), np.float32)
    for t in range(4):
        buffer.add(np.arange(3)[:, None] + 10 * t, np.zeros(3), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool))
    seen = [b.obs[:, 0].tolist() for b in buffer.minibatches(5, np.random.default_rng(0))]
    assert [len(s) for s in seen] == [5, 5, 2]
    assert sorted(sum(seen, [])) == sorted((np.arange(3)[None] + 10 * np.arange(4)[:, None]).ravel().tolist())


def test_collected_rollouts_with_vector_envs_resetting_mid_rollout_store_real_transitions():
    """Three corridor envs (time limit 8, goal 4 steps right) with a random policy: in the middle of the
    rollout episodes end by termination and by truncation, and the envs reset at once."""
    agent = trainer.make("ppo", "rlweb-test/Corridor-box-v0", seed=0, num_envs=3, n_steps=40, batch_size=40)
    from trainer.envs import make_vector_env
    from trainer.runner import Runner

    runner = Runner(agent, end_step=10_000)
    runner._started = runner._next_time_event = runner._next_stop_poll = 0.0
    runner._last_time_event = (0.0, 0)
    envs = make_vector_env(agent.env_id, 3, seed=0)
    buffer = agent.new_buffer(40, 3)
    observations, _ = envs.reset(seed=0)
    observations, last_values, keep_going = agent.collect(runner, envs, buffer, observations)
    envs.close()
    assert keep_going and buffer.full
    ends = buffer.episode_ends > 0
    terminated = buffer.terminated > 0
    truncated = ends & ~terminated
    assert terminated.any() and truncated.any()
    obs = buffer.obs[..., 0]
    # after every episode end the next stored observation is the reset one; within an episode each step moves one cell
    assert (obs[1:][ends[:-1]] == 0).all()
    moves = np.abs(np.diff(obs, axis=0))[~ends[:-1]]
    assert ((moves == 1) | (moves == 0)).all()
    # terminal steps are not bootstrapped; truncated ones use V(last observation), never V(reset observation)
    assert (buffer.final_values[terminated] == 0).all()
    with torch.no_grad():
        for t, env in zip(*np.nonzero(truncated)):
            # the corridor's last observation is where the walker stood at the time limit
            position = obs[t, env] + (1 if buffer.actions[t, env] == 1 else -1 if obs[t, env] > 0 else 0)
            expected = agent.network.values(torch.tensor([[position]], dtype=torch.float32))[0, 0].item()
            assert buffer.final_values[t, env] == pytest.approx(expected, abs=1e-6)
    assert last_values.shape == (3, 1)


def test_episode_buffer_only_hands_out_whole_episodes():
    buffer = EpisodeBuffer(2)
    no = np.array([False, False])
    buffer.add(np.array([[0.0], [0.0]]), np.array([1, 0]), np.array([1.0, 2.0]), no, no)
    buffer.add(np.array([[1.0], [5.0]]), np.array([1, 1]), np.array([1.0, 2.0]), np.array([True, False]), no,
               final_obs=np.array([[2.0], None], dtype=object))
    assert len(buffer.finished) == 1
    (episode,) = buffer.take()
    assert episode.obs[:, 0].tolist() == [0.0, 1.0] and episode.rewards.tolist() == [1.0, 1.0]
    assert episode.terminated and episode.final_obs.tolist() == [2.0]
    buffer.add(np.array([[0.0], [6.0]]), np.array([0, 0]), np.array([1.0, 3.0]), no, np.array([False, True]),
               final_obs=np.array([None, [7.0]], dtype=object))
    (episode,) = buffer.take()
    assert episode.rewards.tolist() == [2.0, 2.0, 3.0] and not episode.terminated  # the truncated one, whole
    assert buffer.take() == []


def test_epochs_normalise_advantages_per_minibatch_and_reshuffle_every_epoch():
    buffer = RolloutBuffer(4, 2, (1,), np.float32)
    for t in range(4):
        buffer.add(np.full((2, 1), t), np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
    buffer.advantages = np.arange(8, dtype=np.float32).reshape(4, 2) * 10
    batches = list(buffer.epochs(3, 4, np.random.default_rng(0), normalize_advantages=True))
    assert [epoch for epoch, _ in batches] == [0, 0, 1, 1, 2, 2]
    for _, batch in batches:
        assert batch.advantages.mean().item() == pytest.approx(0.0, abs=1e-6)
        assert batch.advantages.std().item() == pytest.approx(1.0, abs=1e-5)
    orders = [tuple(b.obs[:, 0].tolist()) for _, b in batches]
    assert len(set(orders)) > 2  # a new random order each epoch
    whole = list(buffer.epochs(2, 8, np.random.default_rng(0)))
    assert len(whole) == 2 and whole[0][1] is whole[1][1]  # the whole rollout, built once
    torch.testing.assert_close(whole[0][1].advantages, torch.as_tensor(buffer.advantages.reshape(-1)))
