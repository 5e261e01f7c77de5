"""Action distributions for the policy-gradient algorithms, one per action space.

`policy_head(action_space, input_size)` gives the layer that turns features into a distribution.
Every distribution offers `sample()`, `log_prob(actions)` and `entropy()` (both summed over action
dimensions, one number per batch row) and `mode()` (the deterministic action).

They are written as plain tensor maths rather than `torch.distributions` objects: the rollout loop
builds one per vector step, and those objects' argument checks cost more than the network itself.
`tests/trainer/test_distributions.py` checks each against `torch.distributions`.

Actions are kept in the distribution's own coordinates (zero-based indices, unclipped Gaussian
samples): that is what the buffers store and what `log_prob` takes. `head.to_env(actions)` turns them
into what the environment accepts (adds `start` offsets, clips to the Box bounds).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class Categorical:
    """Discrete actions: a softmax over logits (batch, n)."""

    def __init__(self, logits: torch.Tensor):
        self.logits = F.log_softmax(logits, dim=-1)  # normalised log-probabilities

    def sample(self) -> torch.Tensor:
        # Gumbel-max: argmax(log p + G) with G = -log(E), E ~ Exp(1); a third of torch.multinomial's cost
        return (self.logits - torch.empty_like(self.logits).exponential_().log()).argmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(dim=-1)


class MultiCategorical:
    """MultiDiscrete actions: independent categoricals, one per dimension; log-probs and entropies add."""

    def __init__(self, logits: torch.Tensor, nvec: list[int]):
        self.parts = [Categorical(chunk) for chunk in torch.split(logits, nvec, dim=-1)]

    def sample(self) -> torch.Tensor:
        return torch.stack([part.sample() for part in self.parts], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(part.log_prob(actions[..., i]) for i, part in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        return sum(part.entropy() for part in self.parts)

    def mode(self) -> torch.Tensor:
        return torch.stack([part.mode() for part in self.parts], dim=-1)


class Bernoulli:
    """MultiBinary actions: one independent coin per bit, from logits (batch, n)."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    def sample(self) -> torch.Tensor:
        return (torch.rand_like(self.logits) < torch.sigmoid(self.logits)).float()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return -F.binary_cross_entropy_with_logits(self.logits, actions.float(), reduction="none").sum(-1)

    def entropy(self) -> torch.Tensor:
        # H = -p log p - (1 - p) log(1 - p), which is the cross-entropy of the coin with itself
        return F.binary_cross_entropy_with_logits(self.logits, torch.sigmoid(self.logits), reduction="none").sum(-1)

    def mode(self) -> torch.Tensor:
        return (self.logits > 0).float()


class DiagonalGaussian:
    """Box actions: a Gaussian per dimension with a state-dependent mean and a learned, state-independent
    log standard deviation (Schulman et al. 2017; "37 implementation details", continuous detail 2)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def sample(self) -> torch.Tensor:
        with torch.no_grad():  # a sample carries no gradient (the log-prob does)
            return self.mean + self.log_std.exp() * torch.randn_like(self.mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z * z - self.log_std - LOG_SQRT_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + LOG_SQRT_2PI + self.log_std).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean


# --- heads: features -> distribution ------------------------------------------------------------------------
# `forward` calls F.linear rather than the nn.Linear module: module calls are a noticeable share of a
# small policy's forward pass in the rollout loop. The ActorCritic calls `head.forward` for the same reason.

class CategoricalHead(nn.Module):
    def __init__(self, space: spaces.Discrete, input_size: int):
        super().__init__()
        self.start = int(space.start)
        self.linear = nn.Linear(input_size, int(space.n))
        self.action_shape: tuple = ()
        self.action_dtype = np.int64

    def forward(self, features: torch.Tensor) -> Categorical:
        return Categorical(F.linear(features, self.linear.weight, self.linear.bias))

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return actions.astype(np.int64) + self.start


class MultiCategoricalHead(nn.Module):
    def __init__(self, space: spaces.MultiDiscrete, input_size: int):
        super().__init__()
        self.shape = space.shape
        self.nvec = [int(n) for n in space.nvec.reshape(-1)]
        self.start = np.asarray(space.start).reshape(-1).astype(np.int64)
        self.linear = nn.Linear(input_size, sum(self.nvec))
        self.action_shape = (len(self.nvec),)
        self.action_dtype = np.int64

    def forward(self, features: torch.Tensor) -> MultiCategorical:
        return MultiCategorical(F.linear(features, self.linear.weight, self.linear.bias), self.nvec)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return (actions.astype(np.int64) + self.start).reshape(len(actions), *self.shape)


class BernoulliHead(nn.Module):
    def __init__(self, space: spaces.MultiBinary, input_size: int):
        super().__init__()
        self.shape = space.shape
        size = int(np.prod(space.shape))
        self.linear = nn.Linear(input_size, size)
        self.action_shape = (size,)
        self.action_dtype = np.float32

    def forward(self, features: torch.Tensor) -> Bernoulli:
        return Bernoulli(F.linear(features, self.linear.weight, self.linear.bias))

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return actions.astype(np.int8).reshape(len(actions), *self.shape)


class GaussianHead(nn.Module):
    def __init__(self, space: spaces.Box, input_size: int, log_std_init: float = 0.0):
        super().__init__()
        self.shape = space.shape
        size = int(np.prod(space.shape))
        self.linear = nn.Linear(input_size, size)
        self.log_std = nn.Parameter(torch.full((size,), float(log_std_init)))
        self.low = space.low.reshape(-1).astype(np.float32)
        self.high = space.high.reshape(-1).astype(np.float32)
        self.action_shape = (size,)
        self.action_dtype = np.float32

    def forward(self, features: torch.Tensor) -> DiagonalGaussian:
        return DiagonalGaussian(F.linear(features, self.linear.weight, self.linear.bias), self.log_std)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        # the env gets the action clipped to its bounds; the loss keeps the log-prob of the unclipped sample
        return np.clip(actions, self.low, self.high).reshape(len(actions), *self.shape)


ACTION_SPACES = ("Discrete", "Box", "MultiDiscrete", "MultiBinary")


def policy_head(space: spaces.Space, input_size: int, log_std_init: float = 0.0) -> nn.Module:
    """The output layer of a policy for `space` (one of ACTION_SPACES)."""
    if isinstance(space, spaces.Discrete):
        return CategoricalHead(space, input_size)
    if isinstance(space, spaces.Box):
        return GaussianHead(space, input_size, log_std_init)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiCategoricalHead(space, input_size)
    if isinstance(space, spaces.MultiBinary):
        return BernoulliHead(space, input_size)
    raise ValueError(f"no policy distribution for the action space {space}")
