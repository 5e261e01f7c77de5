"""Envs that fail in one process of a run on several (RANK 1), registered when a process imports this module
(their ids name it: `tests.trainer.envs_for_distributed_tests:...`, with the module in RLWEB_ENV_MODULES)."""

import os
import signal

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

FAIL_AFTER_STEPS = 300


class FailingCartPole(CartPoleEnv):
    """CartPole that, in process 1 of a run, raises (or kills its process) after FAIL_AFTER_STEPS steps."""

    def __init__(self, how: str = "raise", **kwargs):
        super().__init__(**kwargs)
        self.how = how
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if os.environ.get("RANK") == "1" and self.steps > FAIL_AFTER_STEPS:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("the simulator broke down")
        return super().step(action)


gym.register("RaisingCartPole-v1", entry_point=FailingCartPole, max_episode_steps=500, kwargs={"how": "raise"})
gym.register("KilledCartPole-v1", entry_point=FailingCartPole, max_episode_steps=500, kwargs={"how": "kill"})
