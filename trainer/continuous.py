"""Parts shared by the continuous-control actor-critics (SAC, DDPG, TD3).

Actions are learned in [-1, 1] and rescaled to the env's Box bounds at the boundary
(docs/algorithms.md, P5 and the DDPG/TD3 checklist); critics are an ensemble of Q-networks held as one
tensor per layer; the three collect and train in one loop (`OffPolicyActorCritic.train`).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from trainer.agent import Agent
from trainer.buffers import ReplayBuffer
from trainer.envs import finished_episodes, real_next_observations
from trainer.networks import ObservationEncoder
from trainer.normalization import RewardNormalizer, RunningMeanStd
from trainer.schedules import crossed


def action_bounds_problem(action_space) -> str | None:
    """Why a Box action space cannot be rescaled to [-1, 1], or None when it can."""
    if not isinstance(action_space, spaces.Box):
        return None
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        return "this algorithm needs Box actions with finite bounds (it rescales them to [-1, 1])"
    if np.any(action_space.high <= action_space.low):
        return "every action dimension needs high > low"
    return None


class ActionScaler:
    """Maps actions between [-1, 1] (what the networks produce) and the env's bounds."""

    def __init__(self, action_space: spaces.Box):
        self.shape = action_space.shape
        self.low = action_space.low.astype(np.float64).reshape(-1)
        self.high = action_space.high.astype(np.float64).reshape(-1)
        self.dtype = action_space.dtype

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        actions = np.clip(actions, -1.0, 1.0)  # noise may push past the bounds: clip, as ClipAction would
        scaled = self.low + (actions + 1.0) * 0.5 * (self.high - self.low)
        return scaled.reshape((len(actions), *self.shape)).astype(self.dtype)

    def from_env(self, actions: np.ndarray) -> np.ndarray:
        flat = np.asarray(actions, dtype=np.float64).reshape(len(actions), -1)
        return (2.0 * (flat - self.low) / (self.high - self.low) - 1.0).astype(np.float32)


class EnsembleLinear(nn.Module):
    """The weights of `size` independent linear layers: weight [size, in, out] and bias [size, 1, out]."""

    def __init__(self, size: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's default initialisation, per member
        self.weight = nn.Parameter(torch.empty(size, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(size, 1, out_features).uniform_(-bound, bound))


class QEnsemble(nn.Module):
    """`num_q` critics Q_i(s, a), each an MLP with ReLUs, over one observation encoder; forward returns
    [num_q, batch]. Each layer holds the critics' weights as one tensor, so the critics' parameters are
    one flat tensor per ensemble (and checkpoints keep one entry per layer)."""

    def __init__(self, observation_space, action_size: int, hidden_layers: tuple[int, ...], num_q: int):
        super().__init__()
        self.num_q = num_q
        self.encoder = ObservationEncoder(observation_space)
        sizes = [self.encoder.output_size + action_size, *hidden_layers, 1]
        self.layers = nn.ModuleList(EnsembleLinear(num_q, a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def inputs(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The first layer's input: encoded observations and actions side by side."""
        return torch.cat([self.encoder(observations), actions], dim=1)

    def forward(self, observations: torch.Tensor, actions: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """Q-values [members, batch] of the first `members` critics (all by default), in float32 also
        when the matrix products ran in bfloat16 (see `autocast`)."""
        x = self.inputs(observations, actions)
        # each critic's own weights (unbind: its backward pass copies each layer's gradients once, where
        # indexing would zero-fill the whole layer's gradient for every critic)
        layers = [(layer.weight.unbind(0), layer.bias.unbind(0)) for layer in self.layers]
        q = []
        for i in range(members or self.num_q):
            h = x
            for depth, (weights, biases) in enumerate(layers):
                h = torch.addmm(biases[i], h, weights[i])
                if depth < len(layers) - 1:
                    h = h.relu_()  # in place on addmm's fresh output (its backward does not need it)
            q.append(h)
        return torch.cat(q, dim=1).t().float()


PRECISIONS = ("float32", "bfloat16")


def autocast(device: torch.device, precision: str):
    """Mixed precision for an update's forward passes: with "bfloat16" the matrix products run in
    bfloat16 (2-3x faster on CPUs with AVX512-BF16 or AMX, and on recent GPUs) while weights, optimizer
    state, losses and the networks' outputs stay float32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bfloat16")


@contextlib.contextmanager
def frozen(module: nn.Module):
    """Forward passes inside build no graph towards `module`'s parameters (the actor's loss goes
    through the critic without training it)."""
    parameters = [p for p in module.parameters() if p.requires_grad]
    for p in parameters:
        p.requires_grad_(False)
    try:
        yield module
    finally:
        for p in parameters:
            p.requires_grad_(True)


@torch.no_grad()
def polyak_update(target: list[torch.Tensor], source: list[torch.Tensor], tau: float) -> None:
    """target <- (1 - tau) * target + tau * source, for every tensor at once."""
    torch._foreach_lerp_(target, source, tau)


class OrnsteinUhlenbeckNoise:
    """Temporally correlated exploration noise (Lillicrap et al. 2015), one process per sub-env."""

    def __init__(self, num_envs: int, size: int, sigma: float, theta: float = 0.15, dt: float = 1e-2):
        self.sigma, self.theta, self.dt = sigma, theta, dt
        self.state = np.zeros((num_envs, size))

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        self.state += (-self.theta * self.state * self.dt
                       + self.sigma * math.sqrt(self.dt) * rng.standard_normal(self.state.shape))
        return self.state.copy()

    def reset(self, index: int) -> None:
        self.state[index] = 0.0


def powerlaw_noise(exponent: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise of unit variance whose power spectrum falls as 1/f^exponent along the last axis
    (0: white, 1: pink, 2: red), by random Fourier coefficients (Timmer and Koenig 1995, as the
    colorednoise package; frequencies below 1/length take the lowest one's scale)."""
    length = shape[-1]
    frequencies = np.fft.rfftfreq(length)
    frequencies[0] = frequencies[1] if length > 1 else 1.0
    scale = frequencies ** (-exponent / 2.0)
    weights = scale[1:].copy()
    weights[-1] *= (1 + length % 2) / 2.0  # the Nyquist term counts once for even lengths
    sigma = 2 * np.sqrt(np.sum(weights ** 2)) / length
    real = rng.standard_normal((*shape[:-1], len(frequencies))) * scale
    imaginary = rng.standard_normal((*shape[:-1], len(frequencies))) * scale
    if length % 2 == 0:  # the Nyquist coefficient of a real signal is real
        imaginary[..., -1] = 0.0
        real[..., -1] *= np.sqrt(2.0)
    imaginary[..., 0] = 0.0  # so is the mean
    real[..., 0] *= np.sqrt(2.0)
    return np.fft.irfft(real + 1j * imaginary, n=length, axis=-1) / sigma


class ColoredNoise:
    """Per-sub-env sequences of temporally correlated standard normal noise for exploration (Eberhard
    et al. 2023, "Pink Noise Is All You Need", https://openreview.net/forum?id=hQ9V5QN27eS): `sample()`
    gives the next step's noise [num_envs, size]; `reset(i)` starts a fresh sequence when an episode ends."""

    def __init__(self, exponent: float, num_envs: int, size: int, length: int, rng: np.random.Generator):
        self.exponent, self.size, self.length, self.rng = exponent, size, max(2, length), rng
        self.sequences = powerlaw_noise(exponent, (num_envs, size, self.length), rng)
        self.position = np.zeros(num_envs, dtype=np.int64)

    def sample(self) -> np.ndarray:
        for i in np.flatnonzero(self.position >= self.length):  # a sequence ran out mid-episode
            self.reset(i)
        noise = self.sequences[np.arange(len(self.position)), :, self.position]
        self.position += 1
        return noise.astype(np.float32)

    def reset(self, index: int) -> None:
        self.sequences[index] = powerlaw_noise(self.exponent, (self.size, self.length), self.rng)
        self.position[index] = 0


def episode_length_limit(envs, default: int = 1000) -> int:
    """The time limit of a vector env's episodes (its spec's max_episode_steps), or `default`."""
    spec = getattr(envs.envs[0], "spec", None) if hasattr(envs, "envs") else None
    return int(spec.max_episode_steps) if spec is not None and spec.max_episode_steps else default


def observation_storage_dtype(space) -> np.dtype:
    """Box float64 observations (MuJoCo) are stored as float32: the networks compute in float32."""
    if isinstance(space, spaces.Box) and space.dtype == np.float64:
        return np.dtype(np.float32)
    return space.dtype


class Normalizers:
    """Optional running observation and reward normalisation for the off-policy actor-critics.

    Replay keeps raw observations and rewards; batches are normalised with the current statistics when
    sampled (as SB3 does off-policy), and acting normalises with the same statistics, frozen outside
    training so evaluation sees exactly what the policy was trained on (docs/algorithms.md, P5). The
    statistics are `trainer.normalization`'s, shared with the on-policy algorithms.
    """

    def __init__(self, observation_space, num_envs: int, gamma: float, observations: bool, rewards: bool,
                 device: torch.device):
        self.observations = observations and isinstance(observation_space, spaces.Box) \
            and observation_space.dtype != np.uint8
        self.rewards = rewards
        self.device = device
        self.obs_stats = RunningMeanStd(observation_space.shape) if self.observations else None
        self.reward_normalizer = RewardNormalizer(num_envs, gamma) if rewards else None
        self._sync()

    def _sync(self) -> None:
        if self.observations:
            self._mean = torch.as_tensor(self.obs_stats.mean, dtype=torch.float32, device=self.device)
            self._std = torch.as_tensor(np.sqrt(self.obs_stats.var + 1e-8), dtype=torch.float32, device=self.device)

    def observe(self, observations: np.ndarray, rewards: np.ndarray, done: np.ndarray) -> None:
        """Update the statistics with one vector step (training only)."""
        if self.observations:
            self.obs_stats.update(observations)
            self._sync()
        if self.rewards:
            self.reward_normalizer.normalize(rewards, done, update=True)

    def obs(self, observations: torch.Tensor) -> torch.Tensor:
        if not self.observations:
            return observations
        return ((observations.float() - self._mean) / self._std).clamp_(-10.0, 10.0)

    def reward_scale(self) -> float:
        """Rewards sampled from replay are multiplied by this (the mean is not subtracted)."""
        if not self.rewards:
            return 1.0
        return float(1.0 / np.sqrt(self.reward_normalizer.stats.var + self.reward_normalizer.epsilon))

    def state(self) -> dict:
        return {"observations": self.obs_stats.state_dict() if self.observations else None,
                "returns": self.reward_normalizer.stats.state_dict() if self.rewards else None}

    def load_state(self, state: dict) -> None:
        if self.observations and state.get("observations"):
            self.obs_stats.load_state_dict(state["observations"])
            self._sync()
        if self.rewards and state.get("returns"):
            self.reward_normalizer.stats.load_state_dict(state["returns"])


class OffPolicyActorCritic(Agent):
    """The collection loop SAC, DDPG and TD3 share (Haarnoja et al. 2018 and Fujimoto et al. 2018,
    Algorithm 1): uniformly random actions until learning starts, then the algorithm's exploring actions;
    every transition into replay, as the env gave it (normalised when sampled); every `train_frequency`
    env steps a training phase of `gradient_steps` updates, each on a fresh batch.

    A subclass builds `scaler` (an ActionScaler) and `normalizers` (Normalizers) with its networks, and
    gives `update(batch)` and `exploring_actions(observations)`; the hooks below default to nothing.
    """

    scaler: ActionScaler
    normalizers: Normalizers

    def update(self, batch) -> dict:
        raise NotImplementedError

    def exploring_actions(self, observations: np.ndarray) -> np.ndarray:
        """Training actions in [-1, 1], exploration included, once learning has started."""
        raise NotImplementedError

    def start_exploring(self, envs) -> None:
        """Training starts on `envs` (exploration noise processes are made here)."""

    def episode_ended(self, index: int) -> None:
        """Sub-env `index` ended an episode (temporally correlated noise starts afresh)."""

    def before_updates(self, progress: float) -> dict:
        """A training phase is due at `progress` (a learning-rate schedule steps); returns metrics to record."""
        return {}

    def train(self, runner) -> None:
        c = self.config
        action_size = int(np.prod(self.action_space.shape))
        buffer = self.buffer = ReplayBuffer(
            c.buffer_size, self.observation_space.shape, observation_storage_dtype(self.observation_space),
            action_shape=(action_size,), action_dtype=np.float32, device=self.device)
        with self.training_envs(c.num_envs) as (envs, observations):
            learning_starts = min(max(c.learning_starts, c.batch_size), c.buffer_size)
            self.start_exploring(envs)
            while True:
                if len(buffer) < learning_starts:  # warm start: uniform random actions
                    actions = self.rng.uniform(-1.0, 1.0, size=(c.num_envs, action_size)).astype(np.float32)
                else:
                    actions = self.exploring_actions(observations)
                next_observations, rewards, terminated, truncated, infos = envs.step(self.scaler.to_env(actions))
                done = terminated | truncated
                # truncated transitions keep their real last observation and are bootstrapped (P1)
                buffer.add(observations, actions, rewards, real_next_observations(next_observations, done, infos),
                           terminated)
                self.normalizers.observe(observations, rewards, done)
                observations = next_observations

                for episode_return, length in finished_episodes(infos):
                    runner.episode(episode_return, length)
                for i in np.flatnonzero(done):
                    self.episode_ended(i)

                before = self.steps_done
                keep_going = runner.advance(c.num_envs)
                if len(buffer) >= learning_starts and crossed(before, self.steps_done, c.train_frequency):
                    metrics = self.before_updates(runner.progress)
                    if metrics:
                        runner.record(metrics)
                    for _ in range(c.gradient_steps):
                        runner.record(self.update(buffer.sample(c.batch_size, self.rng)))
                        if runner.should_stop():  # a cancel ends a long training phase within a second
                            break
                if not keep_going:
                    return


def check_continuous_env(config, observation_space, action_space) -> dict[str, str]:
    """Env-dependent checks for SAC, DDPG and TD3 (the registry already refused non-Box actions)."""
    problem = action_bounds_problem(action_space)
    return {"env_id": problem} if problem else {}
