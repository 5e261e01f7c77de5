"""Tiny registered envs for the policy-gradient tests: the corridor of envs_for_tests.py with every
action space (Box, MultiDiscrete, MultiBinary) and a Box observation."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ActionCorridor(gym.Env):
    """Walk right from 0 to `length` (reward 1, terminated); the first action component says "right"."""

    def __init__(self, length=3, action="box"):
        self.length = length
        self.action = action
        self.observation_space = spaces.Box(0, length, shape=(1,), dtype=np.float32)
        self.action_space = {
            "box": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
            "multidiscrete": spaces.MultiDiscrete([2, 3]),
            "multibinary": spaces.MultiBinary(3),
        }[action]

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return np.array([self.position], dtype=np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        right = float(action[0]) > 0 if self.action == "box" else int(action[0]) == 1
        self.position = max(0, self.position + (1 if right else -1))
        terminated = self.position >= self.length
        return np.array([self.position], dtype=np.float32), float(terminated), terminated, False, {}


for kind in ("box", "multidiscrete", "multibinary"):
    env_id = f"rlweb-test/ActionCorridor-{kind}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=ActionCorridor, kwargs={"action": kind}, max_episode_steps=6)


class ImageCorridor(ActionCorridor):
    """The corridor seen as a 36x36 grey image (the smallest the Nature CNN takes), Discrete actions."""

    def __init__(self, length=3):
        super().__init__(length, "box")
        self.observation_space = spaces.Box(0, 255, shape=(36, 36, 1), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)

    def _image(self):
        image = np.zeros((36, 36, 1), dtype=np.uint8)
        image[:, self.position * 8:(self.position + 1) * 8] = 255
        return image

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self._image(), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if int(action) == 1 else -1))
        terminated = self.position >= self.length
        return self._image(), float(terminated), terminated, False, {}


if "rlweb-test/ImageCorridor-v0" not in gym.registry:
    gym.register("rlweb-test/ImageCorridor-v0", entry_point=ImageCorridor, max_episode_steps=6)
