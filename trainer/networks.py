"""Networks shared by the algorithms: observation encoders and MLPs."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F


def parse_hidden_layers(text: str) -> tuple[int, ...]:
    """"256,256" -> (256, 256); an empty string means no hidden layer. Raises ValueError."""
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    try:
        sizes = tuple(int(part) for part in parts)
    except ValueError:
        raise ValueError("must be whole numbers separated by commas, e.g. 256,256") from None
    if any(size < 1 or size > 65536 for size in sizes) or len(sizes) > 16:
        raise ValueError("needs 0 to 16 layers of 1 to 65536 units, e.g. 256,256")
    return sizes


class ObservationEncoder(nn.Module):
    """Turns raw observations (as a tensor) into flat float features.

    Box: flattened floats. Discrete: one-hot. MultiDiscrete: one one-hot per dimension, concatenated.
    MultiBinary: the bits as floats.
    """

    def __init__(self, space: spaces.Space):
        super().__init__()
        self.kind = type(space).__name__
        if isinstance(space, spaces.Box):
            self.output_size = int(np.prod(space.shape))
        elif isinstance(space, spaces.Discrete):
            self.n, self.start = int(space.n), int(space.start)
            self.output_size = self.n
        elif isinstance(space, spaces.MultiDiscrete):
            self.nvec = [int(n) for n in space.nvec.reshape(-1)]
            self.output_size = sum(self.nvec)
        elif isinstance(space, spaces.MultiBinary):
            self.output_size = int(np.prod(space.shape))
        else:
            raise ValueError(f"unsupported observation space {space}")

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        if self.kind == "Discrete":
            return F.one_hot(observations.long().reshape(-1) - self.start, self.n).float()
        if self.kind == "MultiDiscrete":
            flat = observations.long().reshape(observations.shape[0], -1)
            return torch.cat([F.one_hot(flat[:, i], n).float() for i, n in enumerate(self.nvec)], dim=1)
        return observations.reshape(observations.shape[0], -1).float()


def mlp(input_size: int, hidden_sizes: tuple[int, ...], output_size: int, activation=nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    size = input_size
    for hidden in hidden_sizes:
        layers += [nn.Linear(size, hidden), activation()]
        size = hidden
    layers.append(nn.Linear(size, output_size))
    return nn.Sequential(*layers)
