"""Running mean and variance for observation and reward normalisation (ALGORITHMS.md, P5).

Written for SAC/DDPG/TD3 and ES (issue 5) while issue 4 writes `trainer/normalization.py`; the two
should become one module once both exist. Statistics round-trip through a checkpoint as plain JSON
(`state()` / `load_state()`), and are frozen outside training: evaluation only calls `normalize`.
"""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Parallel (Chan et al.) running mean and variance over a batch dimension."""

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64)
        self.update_from_moments(batch.mean(axis=0), batch.var(axis=0), batch.shape[0])

    def update_from_moments(self, batch_mean, batch_var, batch_count: float) -> None:
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: np.ndarray, clip: float = 10.0) -> np.ndarray:
        return np.clip((x - self.mean) / np.sqrt(self.var + 1e-8), -clip, clip).astype(np.float32)

    def state(self) -> dict:
        return {"mean": self.mean.tolist(), "var": self.var.tolist(), "count": self.count}

    def load_state(self, state: dict) -> None:
        self.mean = np.asarray(state["mean"], dtype=np.float64).reshape(self.mean.shape)
        self.var = np.asarray(state["var"], dtype=np.float64).reshape(self.var.shape)
        self.count = float(state["count"])


class ReturnScaler:
    """Scales rewards by the running std of the discounted return (as Gymnasium's NormalizeReward),
    with the algorithm's own gamma (ALGORITHMS.md, P5)."""

    def __init__(self, num_envs: int, gamma: float):
        self.gamma = gamma
        self.returns = np.zeros(num_envs)
        self.stats = RunningMeanStd(())

    def update(self, rewards: np.ndarray, done: np.ndarray) -> None:
        self.returns = self.returns * self.gamma + rewards
        self.stats.update(self.returns)
        self.returns[done] = 0.0

    def scale(self, rewards: np.ndarray, clip: float = 10.0) -> np.ndarray:
        return np.clip(rewards / np.sqrt(self.stats.var + 1e-8), -clip, clip).astype(np.float32)
