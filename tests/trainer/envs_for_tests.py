"""Tiny environments registered for the trainer tests: a corridor with every observation space."""

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces


class Corridor(gym.Env):
    """Walk right from 0 to `length` (reward 1, terminated); a TimeLimit truncates slow walkers."""

    def __init__(self, length=4, observation="box"):
        self.length = length
        self.observation = observation
        self.action_space = spaces.Discrete(2)
        self.observation_space = {
            "box": spaces.Box(0, length, shape=(1,), dtype=np.float32),
            "discrete": spaces.Discrete(length + 1),
            "multidiscrete": spaces.MultiDiscrete([length + 1, 2]),
            "multibinary": spaces.MultiBinary(length + 1),
        }[observation]

    def _obs(self):
        if self.observation == "box":
            return np.array([self.position], dtype=np.float32)
        if self.observation == "discrete":
            return self.position
        if self.observation == "multidiscrete":
            return np.array([self.position, self.position % 2])
        bits = np.zeros(self.length + 1, dtype=np.int8)
        bits[self.position] = 1
        return bits

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self._obs(), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        terminated = self.position >= self.length
        return self._obs(), float(terminated), terminated, False, {}


for kind in ("box", "discrete", "multidiscrete", "multibinary"):
    env_id = f"rlweb-test/Corridor-{kind}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=Corridor, kwargs={"observation": kind}, max_episode_steps=8)


class FaultyCorridor(Corridor):
    """A corridor that goes wrong after `after` steps (counted across episodes): its rewards become NaN or
    infinite, or its step raises (a crashed simulator, or memory running out)."""

    def __init__(self, fault="nan", after=300, observation="box"):
        super().__init__(observation=observation)
        self.fault, self.after, self.steps = fault, after, 0

    def step(self, action):
        self.steps += 1
        observation, reward, terminated, truncated, info = super().step(action)
        if self.steps < self.after:
            return observation, reward, terminated, truncated, info
        if self.fault == "raise":
            raise RuntimeError("the simulator crashed")
        if self.fault == "memory":
            raise MemoryError("cannot allocate 17 GiB")
        if self.fault == "cuda-memory":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return observation, {"nan": float("nan"), "inf": float("inf"), "huge": 1e38}[self.fault], terminated, \
            truncated, info


for fault in ("nan", "inf", "huge", "raise", "memory", "cuda-memory"):
    for kind in ("box", "discrete"):
        env_id = f"rlweb-test/Faulty-{fault}-{kind}-v0"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=FaultyCorridor, kwargs={"fault": fault, "observation": kind},
                         max_episode_steps=8)
