"""Replay storage shared by the off-policy algorithms."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class ReplayBatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor  # 1.0 only at a true terminal state; time-limit truncations stay 0 (bootstrapped)


class ReplayBuffer:
    """A ring buffer of transitions, each stored with its real next observation.

    Storing `next_obs` explicitly (rather than reading obs[i + 1]) keeps the last observation of a
    truncated episode, which the bootstrap needs (ALGORITHMS.md, DQN checklist).
    """

    def __init__(self, capacity: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (), action_dtype=np.int64,
                 device: torch.device | str = "cpu"):
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs = np.zeros((self.capacity, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((self.capacity, *obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((self.capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.position = 0  # where the next transition goes
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """Add one transition per sub-env (arrays with a leading batch dimension)."""
        count = len(rewards)
        indices = (self.position + np.arange(count)) % self.capacity
        self.obs[indices] = obs
        self.next_obs[indices] = next_obs
        self.actions[indices] = actions
        self.rewards[indices] = rewards
        self.terminated[indices] = terminated
        self.position = int((self.position + count) % self.capacity)
        self.size = min(self.capacity, self.size + count)

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        indices = rng.integers(0, self.size, size=batch_size)
        return self.batch(indices)

    def batch(self, indices: np.ndarray) -> ReplayBatch:
        def tensor(array):
            return torch.as_tensor(array[indices], device=self.device)

        return ReplayBatch(tensor(self.obs), tensor(self.actions), tensor(self.rewards), tensor(self.next_obs),
                           tensor(self.terminated))
