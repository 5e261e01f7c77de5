"""A corridor of cells: start at the left end, walk to the right end for a reward of 1 (a small Discrete env)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Corridor(gym.Env):
    """Observation: the position as a one-hot vector. Actions: 0 left, 1 right. Each step costs 0.01; reaching the
    right end ends the episode (terminated) with a reward of 1. The TimeLimit of the registration truncates."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, length: int = 8, render_mode: str | None = None):
        self.length = length
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, shape=(length,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.position = 0

    def observation(self) -> np.ndarray:
        return np.eye(self.length, dtype=np.float32)[self.position]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self.observation(), {}

    def step(self, action):
        self.position = int(np.clip(self.position + (1 if int(action) == 1 else -1), 0, self.length - 1))
        arrived = self.position == self.length - 1
        return self.observation(), (1.0 if arrived else -0.01), arrived, False, {}

    def render(self):
        frame = np.zeros((16, 16 * self.length, 3), dtype=np.uint8)
        frame[:, 16 * self.position:16 * (self.position + 1)] = (255, 200, 0)
        return frame


def register_envs() -> None:
    gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=50, reward_threshold=0.9)
