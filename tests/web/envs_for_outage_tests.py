"""Environments registered for the outage and failure tests: ten-step episodes that call a test's hooks at
given steps, or raise at a given step."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Steps(gym.Env):
    """Every episode lasts ten steps (reward 1 each). `hooks[n]` is called once at the n-th step of the
    first instance's life; with `raise_at`, step number `raise_at` raises `error`."""

    hooks: dict = {}

    def __init__(self, raise_at: int | None = None, error: str = "runtime"):
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0, 10, shape=(1,), dtype=np.float32)
        self.raise_at, self.error, self.steps, self.time = raise_at, error, 0, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.time = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        self.time += 1
        if self.steps == self.raise_at:
            raise MemoryError("test env: out of memory") if self.error == "memory" else RuntimeError(
                f"test env: broke at step {self.steps}")
        hook = Steps.hooks.pop(self.steps, None)
        if hook:
            hook()
        return np.array([self.time], dtype=np.float32), 1.0, self.time >= 10, False, {}


for env_id, kwargs in [("rlweb-test/Steps-v0", {}), ("rlweb-test/BreaksAt300-v0", {"raise_at": 300}),
                       ("rlweb-test/OutOfMemoryAt300-v0", {"raise_at": 300, "error": "memory"})]:
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=Steps, kwargs=kwargs)
