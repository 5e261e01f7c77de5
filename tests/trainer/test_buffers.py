import numpy as np
import pytest

from trainer.buffers import ReplayBuffer
from trainer.schedules import crossed, linear


def test_replay_buffer_wraps_around_and_keeps_the_newest():
    buffer = ReplayBuffer(capacity=4, obs_shape=(2,), obs_dtype=np.float32)
    for t in range(6):
        buffer.add(np.full((1, 2), t), np.array([t]), np.array([float(t)]), np.full((1, 2), t + 100), np.array([0.0]))
    assert len(buffer) == 4
    assert sorted(buffer.rewards.tolist()) == [2.0, 3.0, 4.0, 5.0]
    batch = buffer.batch(np.arange(4))
    # each transition keeps its own next observation, even across the wrap
    assert (batch.next_obs[:, 0] - batch.obs[:, 0] == 100).all()
    assert (batch.actions == batch.rewards.long()).all()


def test_replay_buffer_adds_a_batch_of_sub_envs_at_once():
    buffer = ReplayBuffer(capacity=5, obs_shape=(), obs_dtype=np.int64)
    buffer.add(np.array([1, 2, 3]), np.array([0, 1, 0]), np.ones(3), np.array([2, 3, 4]), np.array([0, 0, 1]))
    buffer.add(np.array([4, 5, 6]), np.array([0, 1, 0]), np.ones(3), np.array([5, 6, 7]), np.array([0, 0, 1]))
    assert len(buffer) == 5 and buffer.position == 1
    assert buffer.obs.tolist() == [6, 2, 3, 4, 5]


def test_sampling_only_returns_filled_slots():
    buffer = ReplayBuffer(capacity=100, obs_shape=(1,), obs_dtype=np.float32)
    buffer.add(np.ones((3, 1)), np.zeros(3), np.ones(3), np.ones((3, 1)), np.zeros(3))
    batch = buffer.sample(64, np.random.default_rng(0))
    assert (batch.obs == 1).all()


def test_linear_schedule_decays_over_its_fraction_and_then_holds():
    epsilon = linear(1.0, 0.04, 0.16)
    assert epsilon(0.0) == 1.0
    assert epsilon(0.08) == pytest.approx(0.52)
    assert epsilon(0.16) == pytest.approx(0.04)
    assert epsilon(0.9) == pytest.approx(0.04)
    # not a jump from start to end after one step (Lightning-AI/tutorials#117)
    assert 0.99 < epsilon(0.001) < 1.0


def test_crossed_counts_interval_boundaries_for_vector_steps():
    assert crossed(9, 10, 10) and not crossed(10, 11, 10)
    assert crossed(8, 12, 10)  # a 4-env step that jumps over the boundary
    assert not crossed(0, 9, 10)
