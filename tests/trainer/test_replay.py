"""Replay internals of the DQN family: sum tree, prioritized sampling, n-step windows."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.buffers import PrioritizedReplayBuffer, ReplayBuffer, SumTree, packed, to_device, unpacked


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 50),
       updates=st.lists(st.tuples(st.integers(0, 49), st.one_of(st.just(0.0), st.floats(1e-3, 100))), min_size=1, max_size=80),
       fractions=st.lists(st.floats(0, 0.999999), min_size=1, max_size=20))
def test_sum_tree_matches_a_brute_force_cumulative_sum(capacity, updates, fractions):
    tree = SumTree(capacity)
    priorities = np.zeros(capacity)
    for index, priority in updates:
        index %= capacity
        tree.update(np.array([index]), np.array([priority]))
        priorities[index] = priority
    assert tree.total == pytest.approx(priorities.sum())
    assert np.allclose(tree[np.arange(capacity)], priorities)
    if priorities.sum() == 0:
        return
    values = np.array(fractions) * priorities.sum()
    found = tree.find(values)
    # the leaf whose cumulative range [c_{i-1}, c_i) holds the value, skipping zero-priority leaves
    expected = np.searchsorted(np.cumsum(priorities), values, side="right")
    assert found.tolist() == np.minimum(expected, capacity - 1).tolist() or np.allclose(
        priorities[found], priorities[np.minimum(expected, capacity - 1)])
    assert (priorities[found] > 0).all()


def test_sum_tree_batch_update_with_repeated_indices_keeps_the_last_value():
    tree = SumTree(8)
    tree.update(np.array([3, 3, 5]), np.array([1.0, 2.0, 4.0]))
    assert tree[3] == 2.0 and tree.total == 6.0


@pytest.mark.parametrize("batch", [1, 3, 32])  # a few indices climb as integers, a batch as arrays
def test_every_inner_node_of_the_sum_tree_is_the_sum_of_its_children(batch):
    rng = np.random.default_rng(batch)
    tree = SumTree(1000)
    priorities = np.zeros(1000)
    for _ in range(200):
        indices = rng.integers(0, 1000, batch)  # repeats included
        values = rng.random(batch)
        tree.update(indices, values)
        for index, value in zip(indices, values):
            priorities[index] = value
    inner = np.arange(1, tree.capacity)
    assert np.allclose(tree.tree[inner], tree.tree[2 * inner] + tree.tree[2 * inner + 1])
    assert np.allclose(tree[np.arange(1000)], priorities) and tree.total == pytest.approx(priorities.sum())


def test_prioritized_sampling_follows_priority_to_the_alpha():
    buffer = PrioritizedReplayBuffer(4, (1,), np.float32, alpha=0.5, epsilon=1e-9)
    buffer.add(np.zeros((4, 1)), np.zeros(4), np.zeros(4), np.zeros((4, 1)), np.zeros(4))
    buffer.update_priorities(np.arange(4), np.array([1.0, 4.0, 9.0, 16.0]))
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(400):
        counts += np.bincount(buffer.sample(32, rng).indices, minlength=4)
    expected = np.array([1, 2, 3, 4]) / 10  # sqrt of the priorities, normalised
    assert np.allclose(counts / counts.sum(), expected, atol=0.01)


def test_new_transitions_get_the_largest_priority_seen_so_far():
    buffer = PrioritizedReplayBuffer(8, (1,), np.float32, alpha=1.0, epsilon=1e-9)
    buffer.add(np.zeros((2, 1)), np.zeros(2), np.zeros(2), np.zeros((2, 1)), np.zeros(2))
    buffer.update_priorities(np.array([0, 1]), np.array([5.0, 0.5]))
    buffer.add(np.zeros((1, 1)), np.zeros(1), np.zeros(1), np.zeros((1, 1)), np.zeros(1))
    assert buffer.tree[2] == pytest.approx(5.0)
    buffer.update_priorities(np.array([0]), np.array([-7.0]))  # priorities use |delta|
    assert buffer.tree[0] == pytest.approx(7.0) and buffer.max_priority == pytest.approx(7.0)


def test_importance_weights_are_normalised_by_the_batch_maximum():
    buffer = PrioritizedReplayBuffer(4, (1,), np.float32, alpha=1.0, epsilon=1e-9)
    buffer.add(np.zeros((4, 1)), np.zeros(4), np.zeros(4), np.zeros((4, 1)), np.zeros(4))
    buffer.update_priorities(np.arange(4), np.array([1.0, 1.0, 1.0, 7.0]))
    batch = buffer.sample(64, np.random.default_rng(1), beta=1.0)
    weights = batch.weights.numpy()
    probabilities = np.array([0.1, 0.1, 0.1, 0.7])[batch.indices]
    expected = (4 * probabilities) ** -1.0
    assert np.allclose(weights, expected / expected.max())
    assert weights.max() == pytest.approx(1.0)


def fill(buffer, rewards, terminated, truncated, num_envs=1):
    """Add steps of `num_envs` sub-envs; observation t of env e is 100 * e + t, next obs + 0.5."""
    for t, (r, te, tr) in enumerate(zip(rewards, terminated, truncated)):
        obs = np.array([[100.0 * e + t] for e in range(num_envs)])
        buffer.add(obs, np.zeros(num_envs), np.array(r, ndmin=1), obs + 0.5, np.array(te, ndmin=1),
                   np.array(tr, ndmin=1))


def test_n_step_returns_stop_at_a_termination_and_discount_by_the_steps_taken():
    buffer = ReplayBuffer(10, (1,), np.float32)
    # a 3-step episode that terminates, then a new one
    fill(buffer, rewards=[1, 2, 4, 8, 16], terminated=[0, 0, 1, 0, 0], truncated=[0, 0, 0, 0, 0])
    batch = buffer.batch(np.array([0, 1, 2, 3]), n_step=3, gamma=0.5)
    assert batch.rewards.tolist() == [1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4, 8 + 0.5 * 16]
    assert batch.terminated.tolist() == [1, 1, 1, 0]  # windows that reach the terminal are masked
    assert batch.next_obs[:, 0].tolist() == [2.5, 2.5, 2.5, 4.5]
    # the last window is cut at the newest stored step and bootstraps from its real next obs
    assert batch.discounts.tolist() == [0.125, 0.25, 0.5, 0.25]


def test_n_step_windows_stop_at_a_truncation_but_still_bootstrap():
    buffer = ReplayBuffer(10, (1,), np.float32)
    fill(buffer, rewards=[1, 1, 1, 1], terminated=[0, 0, 0, 0], truncated=[0, 1, 0, 0])
    batch = buffer.batch(np.array([0]), n_step=3, gamma=0.9)
    assert batch.rewards.item() == pytest.approx(1.9)
    assert batch.terminated.item() == 0 and batch.discounts.item() == pytest.approx(0.81)
    assert batch.next_obs.item() == 1.5  # the truncated episode's own last observation


def test_n_step_windows_follow_one_sub_env_across_the_buffer_wrap():
    buffer = ReplayBuffer(6, (1,), np.float32, num_envs=2)  # three steps of two envs
    fill(buffer, rewards=[[1, 10], [2, 20], [3, 30], [4, 40]], terminated=[[0, 0]] * 4, truncated=[[0, 0]] * 4,
         num_envs=2)
    # slots now hold steps 3, 1, 2 (for each env pair); step 1 of env 1 sits at slot 3
    batch = buffer.batch(np.array([3]), n_step=3, gamma=1.0)
    assert batch.obs.item() == 101.0
    assert batch.rewards.item() == 20 + 30 + 40
    assert batch.next_obs.item() == 103.5


def test_one_step_sampling_uses_plain_gamma():
    buffer = ReplayBuffer(4, (1,), np.float32)
    fill(buffer, rewards=[1, 2], terminated=[0, 1], truncated=[0, 0])
    batch = buffer.batch(np.array([0, 1]), n_step=1, gamma=0.9)
    assert batch.rewards.tolist() == [1, 2] and batch.discounts.tolist() == pytest.approx([0.9, 0.9])


class Frames(__import__("gymnasium").Env):
    """Frames numbered by (episode, step) so every stack is recognisable; random episode ends."""

    def __init__(self):
        import gymnasium as gym

        self.observation_space = gym.spaces.Box(0, 255, (3, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.episode = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._frame(), {}

    def _frame(self):
        return np.full((3, 3), (self.episode * 17 + self.t * 5) % 256, dtype=np.uint8)

    def step(self, action):
        self.t += 1
        end = self.np_random.random()
        return self._frame(), 1.0, bool(end < 0.1), bool(0.1 <= end < 0.15), {}


@pytest.mark.parametrize("num_envs, capacity", [(1, 40), (3, 60)])
def test_frame_stack_buffer_returns_exactly_the_stacks_that_were_observed(num_envs, capacity):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from trainer.buffers import FrameStackReplayBuffer

    envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.FrameStackObservation(Frames(), 4)] * num_envs,
                                    autoreset_mode=AutoresetMode.SAME_STEP)
    frames = FrameStackReplayBuffer(capacity, (4, 3, 3), np.uint8, num_envs=num_envs)
    plain = ReplayBuffer(capacity, (4, 3, 3), np.uint8, num_envs=num_envs)
    observations, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for step in range(200):
        next_observations, rewards, terminated, truncated, infos = envs.step(np.zeros(num_envs, dtype=int))
        real_next = next_observations.copy()
        for i in np.flatnonzero(terminated | truncated):
            real_next[i] = infos["final_obs"][i]
        for buffer in (frames, plain):
            buffer.add(observations, np.zeros(num_envs), rewards, real_next, terminated, truncated)
        observations = next_observations
        indices = frames.sample_indices(32, rng)
        assert (frames.observations_at(indices) == plain.observations_at(indices)).all(), step
        assert (frames.next_observations_at(indices) == plain.next_observations_at(indices)).all(), step
        n_step_frames = frames.batch(indices, n_step=3, gamma=0.9)
        n_step_plain = plain.batch(indices, n_step=3, gamma=0.9)
        assert (n_step_frames.next_obs == n_step_plain.next_obs).all()
    assert frames.size == frames.capacity  # the test went round the ring several times


def test_frame_stack_buffer_keeps_one_atari_frame_per_transition():
    from trainer.buffers import FrameStackReplayBuffer

    buffer = FrameStackReplayBuffer(1000, (4, 84, 84), np.uint8)
    assert 84 * 84 <= buffer.bytes_per_transition() < 84 * 84 + 32
    # a million transitions: about 7.1 GB instead of 2 * 4 * 84 * 84 bytes = 56 GB
    assert buffer.bytes_per_transition() * 1_000_000 / 1e9 == pytest.approx(7.07, abs=0.05)


def test_prioritized_frame_buffer_never_samples_slots_that_lost_their_history():
    from trainer.buffers import PrioritizedFrameStackReplayBuffer

    buffer = PrioritizedFrameStackReplayBuffer(8, (4, 1, 1), np.uint8)
    for t in range(11):
        buffer.add(np.full((1, 4, 1, 1), t), np.zeros(1), np.zeros(1), np.full((1, 4, 1, 1), t + 1), np.zeros(1))
    hidden = buffer.unsampleable()
    assert len(hidden) == 3
    assert (buffer.tree[hidden] == 0).all()
    sampled = buffer.sample(256, np.random.default_rng(0)).indices
    assert not set(sampled.tolist()) & set(hidden.tolist())


def test_a_batch_packed_into_one_buffer_unpacks_to_the_same_arrays():
    """A batch goes to a GPU as one copy of one packed buffer (buffers.to_device): every part comes back
    with its values, dtype and shape, whatever the sizes before it (each part starts 8-byte aligned)."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (3, 4, 5, 7), dtype=np.uint8), np.array([2, 0, 5]), None,
              rng.standard_normal(3).astype(np.float32), np.array([True, False, True]),
              rng.standard_normal((3, 2))[:, ::-1]]  # not contiguous
    staging, layout = packed(arrays)
    assert staging.dtype == torch.uint8 and len(staging) % 8 == 0
    for array, tensor in zip(arrays, unpacked(staging, layout)):
        if array is None:
            assert tensor is None
            continue
        assert tensor.dtype == torch.from_numpy(np.empty(0, array.dtype)).dtype and tuple(tensor.shape) == array.shape
        np.testing.assert_array_equal(tensor.numpy(), array)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device machine)"))])
def test_a_sampled_batch_on_the_device_holds_the_stored_transitions(device):
    buffer = ReplayBuffer(64, (3,), np.float32, device=device)
    for step in range(40):
        buffer.add(np.full((1, 3), step, np.float32), np.array([step % 4]), np.array([step * 0.5], np.float32),
                   np.full((1, 3), step + 1, np.float32), np.array([step % 7 == 6]))
    indices = np.array([0, 5, 39, 12])
    for batch in (buffer.batch(indices), buffer.batch(indices, n_step=3, gamma=0.9)):
        assert batch.obs.device.type == device and batch.obs.dtype == torch.float32
        np.testing.assert_array_equal(batch.obs.cpu().numpy()[:, 0], indices)
        np.testing.assert_array_equal(batch.actions.cpu().numpy(), indices % 4)
    one_step = buffer.batch(indices, gamma=0.9)
    np.testing.assert_array_equal(one_step.rewards.cpu().numpy(), indices * 0.5)
    np.testing.assert_array_equal(one_step.terminated.cpu().numpy(), (indices % 7 == 6).astype(np.float32))
    np.testing.assert_allclose(one_step.discounts.cpu().numpy(), 0.9)
    assert [tensor.device.type for tensor in to_device([np.zeros(2), None], torch.device(device))[:1]] == [device]
