"""R2D1: value rescaling, n-step targets over sequences, sequence replay, the recurrent network, and the
usual smoke, determinism and save/load checks."""

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

import trainer
from trainer.algorithms.r2d1 import (RecurrentQNetwork, SequenceReplay, inverse_value_rescale,
                                     nstep_sequence_targets, value_rescale)

from tests.trainer import envs_for_tests  # noqa: F401

TINY = dict(learning_starts=64, batch_size=4, buffer_size=400, sequence_length=4, burn_in=2, n_step_return=2,
            num_envs=2, hidden_size=8, lstm_size=8, target_update_interval=50)


@pytest.mark.parametrize("epsilon", [1e-3, 1e-2])
def test_value_rescaling_round_trips_over_six_orders_of_magnitude(epsilon):
    x = torch.cat([torch.tensor([0.0, 1e-4, -1e-4, 0.5, -0.5]), torch.logspace(-2, 4, 200, dtype=torch.float64),
                   -torch.logspace(-2, 4, 200, dtype=torch.float64)]).double()
    assert torch.allclose(inverse_value_rescale(value_rescale(x, epsilon), epsilon), x, rtol=1e-9, atol=1e-9)
    y = value_rescale(x, epsilon)
    assert torch.allclose(value_rescale(inverse_value_rescale(y, epsilon), epsilon), y, rtol=1e-9, atol=1e-9)


def test_value_rescaling_compresses_large_values_and_keeps_their_sign():
    x = torch.tensor([-100.0, -1.0, 0.0, 1.0, 100.0])
    h = value_rescale(x, 1e-3)
    assert h.tolist() == pytest.approx([-(np.sqrt(101) - 1) - 0.1, -(np.sqrt(2) - 1) - 1e-3, 0.0,
                                        np.sqrt(2) - 1 + 1e-3, np.sqrt(101) - 1 + 0.1])
    assert torch.equal(value_rescale(x, 0.0), x) and torch.equal(inverse_value_rescale(x, 0.0), x)


def reference_sequence_targets(rewards, terminated, truncated, next_values, gamma, n, first, steps):
    """One return at a time: add rewards until n steps or the episode's end, then bootstrap unless terminated."""
    targets = np.zeros((steps, rewards.shape[1]))
    for k in range(steps):
        for b in range(rewards.shape[1]):
            total, t = 0.0, first + k
            for j in range(n):
                total += gamma ** j * rewards[t + j, b]
                if terminated[t + j, b]:
                    break
                if truncated[t + j, b] or j == n - 1:
                    total += gamma ** (j + 1) * next_values[t + j - first, b]
                    break
            targets[k, b] = total
    return targets


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 5), first=st.integers(0, 3), steps=st.integers(1, 6),
       end_probability=st.sampled_from([0.0, 0.2, 0.6]))
def test_nstep_sequence_targets_match_a_return_at_a_time(seed, n, first, steps, end_probability):
    rng = np.random.default_rng(seed)
    length, batch, gamma = first + steps + n, 3, 0.9
    rewards = rng.normal(size=(length, batch))
    ends = rng.random((length, batch)) < end_probability
    terminated = ends & (rng.random((length, batch)) < 0.5)
    truncated = ends & ~terminated
    next_values = rng.normal(size=(length - first, batch))
    expected = reference_sequence_targets(rewards, terminated, truncated, next_values, gamma, n, first, steps)
    actual = nstep_sequence_targets(torch.tensor(rewards), torch.tensor(terminated, dtype=torch.float64),
                                    torch.tensor(ends), torch.tensor(next_values), gamma, n, first, steps)
    assert np.allclose(actual.numpy(), expected)


def test_nstep_sequence_targets_stop_at_a_termination_and_bootstrap_a_truncation():
    rewards = torch.ones(4, 2)
    terminated = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    ended = torch.tensor([[False, False], [True, True], [False, False], [False, False]])  # env 1 truncated
    next_values = torch.full((4, 2), 10.0)
    targets = nstep_sequence_targets(rewards, terminated, ended, next_values, 0.5, 3, 0, 1)
    assert targets[0].tolist() == [1 + 0.5, 1 + 0.5 + 0.25 * 10]


def filled_replay(steps, num_envs=2, length=10, window=4):
    replay = SequenceReplay(length * num_envs, num_envs, window, spaces.Box(-np.inf, np.inf, (1,)), lstm_size=2,
                            alpha=1.0)
    for t in range(steps):
        observations = np.full((num_envs, 1), t, dtype=np.float32) + np.arange(num_envs)[:, None] * 1000
        ends = np.array([t % 7 == 6] * num_envs)
        replay.add(observations, np.zeros(num_envs), np.ones(num_envs), ends, np.zeros(num_envs, bool),
                   np.array([t % 7 == 0] * num_envs), (np.zeros((num_envs, 2)), np.zeros((num_envs, 2))), None)
    return replay


@pytest.mark.parametrize("steps", [4, 9, 10, 23, 57])
def test_sequence_replay_only_samples_whole_windows_of_current_data(steps):
    replay = filled_replay(steps)
    slots, times, envs, weights = replay.sample(500, np.random.default_rng(0), beta=0.4)
    windows = replay.obs[times, envs][..., 0]  # [window, batch]
    offsets = envs * 1000
    # each window is 4 consecutive steps of one env, none older than the newest 10, none cut by the write head
    assert np.all(np.diff(windows, axis=0) == 1)
    assert np.all(windows[0] - offsets >= max(0, steps - 10)) and np.all(windows[-1] - offsets <= steps - 1)
    assert weights.max() == pytest.approx(1.0) and np.all(weights > 0)
    expected_starts = min(steps, 10) - 4 + 1
    assert len(set(zip(windows[0].tolist(), envs.tolist()))) == expected_starts * 2


def test_sequence_priorities_follow_the_update():
    replay = filled_replay(12)
    rng = np.random.default_rng(0)
    slots, *_ = replay.sample(8, rng, beta=1.0)
    favourite = slots[0]
    others = np.setdiff1d(np.flatnonzero(replay.tree[np.arange(20)] > 0), [favourite])
    replay.update_priorities(np.array([favourite]), np.array([100.0]))
    replay.update_priorities(others, np.full(len(others), 1e-3))
    sampled, *_ = replay.sample(200, rng, beta=1.0)
    assert np.mean(sampled == favourite) > 0.9


def test_the_network_starts_a_fresh_state_at_episode_starts_inside_a_sequence():
    torch.manual_seed(0)
    network = RecurrentQNetwork(spaces.Box(-1, 1, (3,)), 2, 8, 8)
    observations = torch.randn(5, 1, 3)
    starts = torch.tensor([[False], [False], [False], [True], [False]])
    warm = (torch.randn(1, 8), torch.randn(1, 8))
    q, _ = network.unroll(observations, starts, warm)
    fresh, _ = network.unroll(observations[3:], torch.zeros(2, 1, dtype=torch.bool), network.initial_state(1, "cpu"))
    assert torch.allclose(q[3:], fresh, atol=1e-6)
    assert not torch.allclose(q[:3], network.unroll(observations[:3], starts[:3], network.initial_state(1, "cpu"))[0])


@pytest.mark.parametrize("kind", ["box", "discrete", "multidiscrete", "multibinary"])
def test_r2d1_trains_saves_loads_and_acts_the_same_on_every_observation_space(kind, tmp_path):
    agent = trainer.make("r2d1", f"rlweb-test/Corridor-{kind}-v0", seed=0, **TINY)
    summary = agent.learn(300, checkpoint_dir=tmp_path, eval_episodes=2)
    assert summary["status"] == "succeeded" and summary["steps"] == 300
    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.name == "r2d1"
    observations = [agent.observation_space.sample() for _ in range(12)]
    agent.reset_state()
    loaded.reset_state()
    # the recurrent state carries over from call to call, so whole sequences of actions must agree
    assert [int(agent.predict(o)) for o in observations] == [int(loaded.predict(o)) for o in observations]


def test_r2d1_with_the_same_seed_gives_the_same_metrics():
    def losses():
        sink = trainer.events.ListSink()
        trainer.make("r2d1", "CartPole-v1", seed=3, **TINY).learn(200, sink=sink, eval_episodes=0)
        return [event["values"] for event in sink.of_kind("train")]

    first = losses()
    assert first and first == losses()


def test_r2d1_refuses_continuous_actions_and_a_buffer_too_small_for_two_sequences():
    with pytest.raises(trainer.ConfigError, match="action"):
        trainer.make("r2d1", "Pendulum-v1")
    with pytest.raises(trainer.ConfigError) as error:
        trainer.make("r2d1", "CartPole-v1", buffer_size=100, sequence_length=40, burn_in=20, n_step_return=5, num_envs=4)
    assert "buffer_size" in error.value.errors


def test_every_evaluation_and_video_episode_starts_from_a_fresh_recurrent_state(tmp_path):
    from trainer.video import record_episode, video_env

    agent = trainer.make("r2d1", "CartPole-v1", seed=0, **TINY)
    agent.learn(200, eval_episodes=0)
    first = agent.evaluate(3, seed=5)["returns"]
    agent.state = (agent.state[0] + 5.0, agent.state[1] - 5.0)  # whatever the last episode left behind
    assert agent.evaluate(3, seed=5)["returns"] == first
    env = video_env("CartPole-v1")
    recorded = [record_episode(agent, env, tmp_path / f"{i}.mp4", seed=5)["episode_return"] for i in range(2)]
    env.close()
    assert recorded == [first[0]] * 2
