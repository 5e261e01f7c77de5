"""Networks shared by the algorithms: observation encoders and MLPs."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from trainer.envs import is_image_space
from trainer.params import parse_hidden_layers  # noqa: F401  (networks' users take it from here too)


def image_channels_first(shape: tuple[int, ...]) -> bool:
    """(C, H, W) as frame stacks come, versus (H, W, C) as rendered RGB frames come."""
    return len(shape) == 2 or not (shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4))


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. 2015: three conv layers and a 512-unit linear layer.

    Takes uint8 images and scales them to [0, 1] on the device, so replay keeps bytes. On a CPU the
    images go through the convolutions in channels-last (NHWC) layout, where oneDNN computes the first
    layer's weight gradient (4 input channels) about 1.8x as fast; a whole Atari DQN update gained about
    4% (docs/benchmarks.md). The values are the same to float32 rounding.
    """

    def __init__(self, shape: tuple[int, ...], output_size: int = 512):
        super().__init__()
        self.channels_first = image_channels_first(shape)
        if len(shape) == 2:
            channels, height, width = 1, *shape
        elif self.channels_first:
            channels, height, width = shape
        else:
            height, width, channels = shape
        if height < 36 or width < 36:
            raise ValueError(f"image observations must be at least 36x36 for the Nature CNN, got {shape}")
        self.convolutions = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convolutions(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(nn.Linear(flat, output_size), nn.ReLU())
        self.output_size = output_size

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() == 3:  # a batch of single-channel frames
            images = images.unsqueeze(1)
        elif not self.channels_first:
            images = images.permute(0, 3, 1, 2)  # (H, W, C) frames: already channels-last in memory
        if images.device.type == "cpu":
            images = images.contiguous(memory_format=torch.channels_last)  # on the bytes: a quarter of the copy
        # uint8 / float gives float32 in one pass (no separate conversion); Flatten reads NHWC back in
        # (C, H, W) order, so the linear layer sees the same features in either layout
        return self.linear(self.convolutions(images / 255.0))


class ObservationEncoder(nn.Module):
    """Turns raw observations (as a tensor) into flat float features of size `output_size`.

    Box: flattened floats, or a Nature CNN for uint8 images. Discrete: one-hot. MultiDiscrete: one
    one-hot per dimension, concatenated. MultiBinary: the bits as floats.
    """

    def __init__(self, space: spaces.Space):
        super().__init__()
        self.kind = "Image" if is_image_space(space) else type(space).__name__
        if self.kind == "Image":
            self.cnn = NatureCNN(space.shape)
            self.output_size = self.cnn.output_size
        elif isinstance(space, spaces.Box):
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
        if self.kind == "Image":
            return self.cnn(observations)
        if self.kind == "Discrete":
            return F.one_hot(observations.long().reshape(-1) - self.start, self.n).float()
        if self.kind == "MultiDiscrete":
            flat = observations.long().reshape(observations.shape[0], -1)
            return torch.cat([F.one_hot(flat[:, i], n).float() for i, n in enumerate(self.nvec)], dim=1)
        return observations.reshape(observations.shape[0], -1).float()


def run_layers(layers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """The same as calling an `nn.Sequential` of these layers, with Linear, ReLU and Tanh layers run as
    plain function calls (on a CPU, module calls cost a third of a small MLP's forward pass), and
    activations in place on a Linear's fresh output (its backward does not need it)."""
    fresh = False
    for layer in layers:
        if type(layer) is nn.Linear:
            x = F.linear(x, layer.weight, layer.bias)
        elif type(layer) is nn.ReLU:
            x = x.relu_() if fresh else torch.relu(x)
        elif type(layer) is nn.Tanh:
            x = x.tanh_() if fresh else torch.tanh(x)
        else:
            x = layer(x)
        fresh = type(layer) is nn.Linear
    return x


def mlp(input_size: int, hidden_sizes: tuple[int, ...], output_size: int | None, activation=nn.ReLU,
        linear=nn.Linear) -> nn.Sequential:
    """Hidden layers with `activation`, then a linear output layer (none when `output_size` is None).
    `linear` builds each layer, e.g. a NoisyLinear factory."""
    layers: list[nn.Module] = []
    size = input_size
    for hidden in hidden_sizes:
        layers += [linear(size, hidden), activation()]
        size = hidden
    if output_size is not None:
        layers.append(linear(size, output_size))
    return nn.Sequential(*layers)


class NoisyLinear(nn.Module):
    """A linear layer with learned Gaussian noise on its weights (Fortunato et al. 2018,
    https://arxiv.org/abs/1706.10295). `factorised` noise is f(e_out) outer f(e_in) with
    f(x) = sign(x) sqrt|x|; otherwise every weight draws its own noise. The noise changes only when
    `reset_noise()` is called; in eval mode the layer uses its mean weights.

    Factorised noise is kept as its two vectors and never made into a matrix: the noisy part of the output,
    x (sigma * e_out e_in^T)^T, is e_out * ((x * e_in) sigma^T), the same numbers for a matmul's cost. A
    Rainbow act step on Pong took 5.0 ms of CPU with the matrix drawn and added every step, 3.4-3.7 ms without
    (`python -m benchmarks dqn --atari-phases`, the two interleaved)."""

    def __init__(self, in_features: int, out_features: int, std_init: float = 0.5, factorised: bool = True):
        super().__init__()
        self.in_features, self.out_features, self.factorised = in_features, out_features, factorised
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        # buffers, not parameters: the optimiser never touches the noise. Written in place, so that a CUDA
        # graph sees each new draw; factorised noise is redrawn before every use, so it is not checkpointed
        if factorised:
            self.register_buffer("noise_in", torch.zeros(in_features), persistent=False)
            self.register_buffer("noise_out", torch.zeros(out_features), persistent=False)
        else:
            self.register_buffer("weight_epsilon", torch.zeros(out_features, in_features))
        self.register_buffer("bias_epsilon", torch.zeros(out_features))
        bound = 1 / np.sqrt(in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        if factorised:
            nn.init.constant_(self.weight_sigma, std_init / np.sqrt(in_features))
            nn.init.constant_(self.bias_sigma, std_init / np.sqrt(out_features))
        else:  # independent Gaussian noise, sigma_0 = 0.017 in the paper
            nn.init.constant_(self.weight_sigma, std_init)
            nn.init.constant_(self.bias_sigma, std_init)
        self.reset_noise()

    @staticmethod
    def _scaled_noise(size: int, device) -> torch.Tensor:
        noise = torch.randn(size, device=device)
        return noise.sign() * noise.abs().sqrt()

    def reset_noise(self) -> None:
        device = self.weight_mu.device
        if self.factorised:
            self.noise_in.copy_(self._scaled_noise(self.in_features, device))
            self.noise_out.copy_(self._scaled_noise(self.out_features, device))
            self.bias_epsilon.copy_(self.noise_out)
        else:
            self.weight_epsilon.normal_()
            self.bias_epsilon.normal_()

    def weight_noise(self) -> torch.Tensor:
        """The noise on the weights as a matrix (the outer product of the two vectors when factorised)."""
        return torch.outer(self.noise_out, self.noise_in) if self.factorised else self.weight_epsilon

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(inputs, self.weight_mu, self.bias_mu)
        bias = self.bias_mu + self.bias_sigma * self.bias_epsilon
        if self.factorised:
            noisy_part = F.linear(inputs * self.noise_in, self.weight_sigma) * self.noise_out
            return F.linear(inputs, self.weight_mu, bias) + noisy_part
        return F.linear(inputs, self.weight_mu + self.weight_sigma * self.weight_epsilon, bias)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints from before the vectors hold the factorised noise as a matrix: it is redrawn anyway
        if self.factorised:
            state_dict.pop(prefix + "weight_epsilon", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def reset_noise(module: nn.Module) -> None:
    """Draw new noise in every NoisyLinear of `module`."""
    for layer in module.modules():
        if isinstance(layer, NoisyLinear):
            layer.reset_noise()
