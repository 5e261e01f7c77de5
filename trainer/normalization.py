"""Running normalisation of observations and rewards, saved in checkpoints as small JSON state.

The statistics are updated while training and frozen for evaluation and prediction (docs/algorithms.md, P5):
an agent loaded from a checkpoint must see observations scaled exactly as they were when it was saved.
`state_dict()` / `load_state_dict()` give and take plain lists and floats for `Agent.extra_state`.
"""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Mean and variance of a stream of arrays, merged batch by batch (Chan et al.'s parallel update)."""

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)  # a tiny prior count keeps the first update finite

    def update(self, batch: np.ndarray) -> None:
        """Add a batch of samples (the leading dimension indexes samples)."""
        batch = np.asarray(batch, dtype=np.float64)
        batch_count = batch.shape[0]
        if batch_count == 0:
            return
        batch_mean, batch_var = batch.mean(axis=0), batch.var(axis=0)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.var = m2 / total
        self.count = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def state_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "var": self.var.tolist(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        shape = self.mean.shape
        mean = np.asarray(state["mean"], dtype=np.float64)
        var = np.asarray(state["var"], dtype=np.float64)
        if mean.shape != shape or var.shape != shape:
            raise ValueError(f"normalisation statistics of shape {mean.shape} do not fit {shape}")
        self.mean, self.var, self.count = mean, var, float(state["count"])


class ObservationNormalizer:
    """(obs - mean) / sqrt(var + eps), clipped to [-clip, clip]; `normalize(obs, update=True)` while
    collecting, `update=False` (frozen) everywhere else."""

    def __init__(self, shape: tuple, clip: float = 10.0, epsilon: float = 1e-8):
        self.stats = RunningMeanStd(shape)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self._refresh()

    def _refresh(self) -> None:
        # float32 copies, so normalising a batch is two cheap NumPy operations; made again whenever the statistics
        # took samples (here, or merged with other processes' in a run on several: trainer/distributed.py)
        self._mean = self.stats.mean.astype(np.float32)
        self._scale = (1.0 / np.sqrt(self.stats.var + self.epsilon)).astype(np.float32)
        self._count = self.stats.count

    def mean_and_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, 1 / std) as float32: normalised = (observation - mean) * scale, then clipped."""
        if self._count != self.stats.count:
            self._refresh()
        return self._mean, self._scale

    def update(self, observations: np.ndarray) -> None:
        self.stats.update(observations)
        self._refresh()

    def normalize(self, observations: np.ndarray, update: bool = False) -> np.ndarray:
        if update:
            self.update(observations)
        mean, scale = self.mean_and_scale()
        return np.clip((np.asarray(observations, dtype=np.float32) - mean) * scale, -self.clip, self.clip)

    def state_dict(self) -> dict:
        return {"stats": self.stats.state_dict(), "clip": self.clip, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict) -> None:
        self.stats.load_state_dict(state["stats"])
        self.clip, self.epsilon = float(state["clip"]), float(state["epsilon"])
        self._refresh()


class RewardNormalizer:
    """Divides rewards by the running standard deviation of the discounted return, then clips.

    The return is accumulated per sub-env with the algorithm's own discount and reset at every episode
    end, as in Gymnasium's NormalizeReward and SB3's VecNormalize (docs/algorithms.md, P5: use the same gamma).
    The mean is not subtracted: shifting rewards would change which policy is optimal.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.stats = RunningMeanStd(())
        self.gamma = float(gamma)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.returns = np.zeros(num_envs, dtype=np.float64)

    def normalize(self, rewards: np.ndarray, dones: np.ndarray, update: bool = True) -> np.ndarray:
        """Scale one vector step of rewards; `dones` (terminated or truncated) restarts those returns."""
        if update:
            self.returns = self.returns * self.gamma + rewards
            self.stats.update(self.returns)
            self.returns[dones] = 0.0
        scaled = rewards / np.sqrt(self.stats.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict:
        return {"stats": self.stats.state_dict(), "gamma": self.gamma, "clip": self.clip, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict) -> None:
        self.stats.load_state_dict(state["stats"])
        self.gamma, self.clip, self.epsilon = float(state["gamma"]), float(state["clip"]), float(state["epsilon"])
