"""Parts shared by the continuous-control actor-critics (SAC, DDPG, TD3).

Actions are learned in [-1, 1] and rescaled to the env's Box bounds at the boundary
(ALGORITHMS.md, P5 and the DDPG/TD3 checklist); critics are an ensemble of Q-networks held as one
tensor per layer: on a GPU or in bfloat16 each layer is one batched matrix product, and on a CPU in
float32 each member runs its own products with a hand-written backward pass (`ensemble_backward`),
which the hand-written SAC and TD3 updates call directly.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from trainer.networks import NumpyMLP, ObservationEncoder
from trainer.normalization import RewardNormalizer, RunningMeanStd


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
    """`size` independent linear layers applied with one batched matmul: [E, B, in] -> [E, B, out]."""

    def __init__(self, size: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's default initialisation, per member
        self.weight = nn.Parameter(torch.empty(size, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(size, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """The first `members` layers (all by default) on x [members, batch, in]."""
        return torch.baddbmm(self.bias[:members], x, self.weight[:members])


def ensemble_forward(parameters: tuple[torch.Tensor, ...], members: int,
                     x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The first `members` critics of an ensemble MLP, one matrix product per member and layer.

    `parameters` are (weight_1, bias_1, ...) with weights [ensemble, in, out] and biases [ensemble, 1, out]
    as `EnsembleLinear` holds them, each layer but the last followed by a ReLU. Returns q [members, batch]
    and the hidden activations that `ensemble_backward` needs.
    """
    weights, biases = parameters[0::2], parameters[1::2]
    hidden, q = [], []
    for i in range(members):
        h = x
        for weight, bias in zip(weights[:-1], biases[:-1]):
            h = torch.addmm(bias[i, 0], h, weight[i]).relu_()
            hidden.append(h)
        q.append(torch.addmm(biases[-1][i, 0], h, weights[-1][i]))
    return torch.cat(q, dim=1).t(), hidden


def ensemble_backward(parameters: tuple[torch.Tensor, ...], members: int, x: torch.Tensor,
                      hidden: list[torch.Tensor], grad_q: torch.Tensor, grads: list[torch.Tensor] | None,
                      input_needed: bool) -> torch.Tensor | None:
    """The backward pass of `ensemble_forward` for the output gradient grad_q [members, batch].

    Writes the parameter gradients into `grads` (tensors shaped like `parameters`; members left out get
    zeros) unless it is None, and returns the input gradient when `input_needed`. Without parameter
    gradients, only the rows with an output gradient are computed (through a min, about half).
    """
    weights = parameters[0::2]
    depth = len(weights)
    if grads is not None and members < len(weights[0]):
        for grad in grads:
            grad[members:].zero_()
    grad_x = torch.zeros_like(x) if input_needed else None
    for i in range(members):
        inputs = [x, *hidden[i * (depth - 1):(i + 1) * (depth - 1)]]
        g = grad_q[i].unsqueeze(1)  # [batch, 1]: the output layer's gradient
        rows = None
        if grads is None:
            rows = g.squeeze(1).nonzero().squeeze(1)
            if len(rows) > 0.75 * len(g):
                rows = None
            else:
                g, inputs = g[rows], [t[rows] for t in inputs]
        for layer in reversed(range(depth)):
            if grads is not None:
                torch.mm(inputs[layer].t(), g, out=grads[2 * layer][i])
                torch.sum(g, 0, keepdim=True, out=grads[2 * layer + 1][i])
            if layer > 0:  # through the layer, then through the ReLU that made its input
                g = g @ weights[layer][i].t()
                g = torch.ops.aten.threshold_backward.grad_input(g, inputs[layer], 0, grad_input=g)
            elif input_needed:
                g = g @ weights[0][i].t()
                if rows is None:
                    grad_x.add_(g)
                else:
                    grad_x.index_add_(0, rows, g)
    return grad_x


class EnsembleMLP(torch.autograd.Function):
    """`ensemble_forward` under autograd, for the critics of a `QEnsemble` on a CPU in float32.

    Same values and gradients as the batched products (`tests/trainer/test_continuous_control.py`),
    about a sixth faster: batched products copy their transposed operands in the backward pass, and
    autograd through one member's slice of an ensemble parameter zero-fills the whole gradient first.
    Frozen critics (the actor's loss) get only the input gradient.

    apply(members, x [batch, in], weight_1, bias_1, ...) -> q [members, batch].
    """

    @staticmethod
    def forward(ctx, members: int, x: torch.Tensor, *parameters: torch.Tensor) -> torch.Tensor:
        q, hidden = ensemble_forward(parameters, members, x)
        ctx.members, ctx.hidden_count = members, len(hidden)
        ctx.save_for_backward(x, *hidden, *parameters)
        return q

    @staticmethod
    def backward(ctx, grad_q: torch.Tensor):
        x, *saved = ctx.saved_tensors
        hidden, parameters = saved[:ctx.hidden_count], tuple(saved[ctx.hidden_count:])
        grads = [torch.empty_like(p) for p in parameters] if any(ctx.needs_input_grad[2:]) else None
        grad_x = ensemble_backward(parameters, ctx.members, x, hidden, grad_q, grads, ctx.needs_input_grad[1])
        return None, grad_x, *(grads or [None] * len(parameters))


class QEnsemble(nn.Module):
    """`num_q` critics Q_i(s, a) over one observation encoder; forward returns [num_q, batch]."""

    def __init__(self, observation_space, action_size: int, hidden_layers: tuple[int, ...], num_q: int):
        super().__init__()
        self.num_q = num_q
        self.encoder = ObservationEncoder(observation_space)
        sizes = [self.encoder.output_size + action_size, *hidden_layers, 1]
        self.layers = nn.ModuleList(EnsembleLinear(num_q, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.layer_list = tuple(self.layers)  # slicing a ModuleList builds a new one on every call
        self.parameter_list = tuple(t for layer in self.layers for t in (layer.weight, layer.bias))

    def inputs(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The first layer's input: encoded observations and actions side by side."""
        return torch.cat([self.encoder(observations), actions], dim=1)

    def forward(self, observations: torch.Tensor, actions: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """Q-values [members, batch] of the first `members` critics (all by default), in float32 also
        when the matrix products ran in bfloat16 (see `autocast`)."""
        x = self.inputs(observations, actions)
        members = members or self.num_q
        if x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            return EnsembleMLP.apply(members, x, *self.parameter_list)
        *hidden, last = self.layer_list
        x = x.unsqueeze(0).expand(members, -1, -1)
        for layer in hidden:
            x = torch.relu(layer(x, members))
        return last(x, members).squeeze(-1).float()


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
    training so evaluation sees exactly what the policy was trained on (ALGORITHMS.md, P5). The
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


def numpy_actor_body(actor: nn.Module, normalizers: Normalizers) -> NumpyMLP | None:
    """`actor.body` as a NumpyMLP, for acting a step at a time on vector observations without
    normalisation (several times faster than torch at a batch of one), or None."""
    layers = list(actor.body)
    usable = actor.encoder.kind == "Box" and not normalizers.observations and NumpyMLP.supports(layers)
    return NumpyMLP(layers) if usable else None


def by_hand_actor_layers(actor: nn.Module, device: torch.device, precision: str) -> list[nn.Linear] | None:
    """The Linear layers of `actor.body` when the update can work out its gradients by hand (an MLP of
    Linear and ReLU layers on vector observations, on a CPU in float32), or None (autograd)."""
    usable = (device.type == "cpu" and precision == "float32" and actor.encoder.kind != "Image"
              and all(type(layer) in (nn.Linear, nn.ReLU) for layer in actor.body))
    return [layer for layer in actor.body if type(layer) is nn.Linear] if usable else None


def check_continuous_env(config, observation_space, action_space) -> dict[str, str]:
    """Env-dependent checks for SAC, DDPG and TD3 (the registry already refused non-Box actions)."""
    problem = action_bounds_problem(action_space)
    return {"env_id": problem} if problem else {}


def real_next_observations(next_observations: np.ndarray, done: np.ndarray, infos: dict) -> np.ndarray:
    """With SAME_STEP autoreset, a finished sub-env's real last observation is in infos (P2)."""
    if not done.any():
        return next_observations
    real = next_observations.copy()
    for i in np.flatnonzero(done):
        real[i] = infos["final_obs"][i]
    return real
