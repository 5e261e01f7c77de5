"""The CPU speed paths: the same maths as torch's general code, in fewer calls.

Our networks are small (two hidden layers of 64 to 256 units) and train on a CPU one small batch at a
time, where torch's per-call overhead (dispatch, autograd's bookkeeping, the optimizers' grouping of
tensors, module calls) costs as much as the arithmetic itself. Each path below cuts that overhead
without changing the maths (the numbers agree with torch's to float32 rounding), and each has its
equivalence test in tests/trainer/test_cpu_speed.py. The algorithm modules read as their papers, with
autograd; they reach these paths only through this module (DQN's through the strategy that
trainer/update_strategies.py picks when the agent is built), and only where `hand_paths_apply` says
so: on a CPU, in float32, for plain Linear networks. Anywhere else (a GPU, bfloat16, images, noisy or
dueling layers) the readable autograd code runs.

A hand path stays only where it gains at least 10% over autograd on flat parameters. Measured on
2026-11-25 on a 2-core AMD EPYC VM, one torch thread (as the CLI and the worker train), medians of
interleaved runs of the default networks:

- Flat parameters (`FlatParameters`, `clip_grad_norm`) and flat optimizers (`FlatAdam`, `FlatRMSprop`):
  a network's parameters and gradients are views into one tensor, so clipping is a few tensor calls
  and an optimizer step is one kernel call. Used on every device (fewer kernel launches on a GPU too);
  they are the base the hand paths are measured against.
- Numpy acting (`NumpyMLP`, built by `numpy_network` for DQN and A2C): acting a step at a time, a
  small MLP run by numpy on views of its weights, where torch's per-call overhead is most of the
  forward pass. At a batch of one, numpy against torch (no_grad): DQN 256,256 8.7 us against 24.4 us;
  the 64,64 tanh actor with its Gumbel-max sample 8.7 against 24.5 (2026-11-25). In whole runs
  (`python -m benchmarks fast_paths`, 2026-11-27): DQN 1.20x, A2C 1.19x: kept; PPO 1.09x (the
  update's 20 epochs dominate), SAC 1.03x, TD3 1.01x: dropped for them, they act through torch.
- DQN's hand-written TD-loss gradients (`td_loss_gradients`, `plain_forward`, `plain_backward`):
  one forward and one backward pass through a Linear/ReLU Q-network without an autograd graph.
  One step on CartPole, 256,256, batch 64: 378 us against 461 us with autograd (22%, 2026-11-25);
  whole runs 1.24x (2026-11-27): kept.

Dropped for gaining less than 10%: the hand-written gradients of SAC, DDPG and TD3 (their own
measurement), and the critic ensemble function (`EnsembleMLP`: one matrix product per critic and
layer, with a hand-written backward pass): a SAC update at 256,256, batch 256, took 6.49 ms with it
against 6.56 ms with plain autograd over each critic's own weights (1%), which `QEnsemble` now does
(batched products through autograd took 7.62 ms; two separate nn.Linear critics 6.79 ms).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainer.networks import ObservationEncoder


def hand_paths_apply(device: torch.device | str, dtype: torch.dtype, layers: list[nn.Module],
                     activations: tuple[type[nn.Module], ...] = (nn.ReLU, nn.Tanh)) -> bool:
    """The one rule that selects a hand path (numpy acting, DQN's hand-written gradients) over torch's
    general code: the network runs on a CPU, its arithmetic is float32 (not bfloat16), and `layers` are
    Linear layers with bias on that device in float32 and the `activations` the path computes, after an
    `ObservationEncoder` of flat vector features if one is given. Elsewhere the overhead these paths
    save is small against the work (a GPU), or the path would compute something else (images,
    one-hots, noisy layers, other activations)."""
    if torch.device(device).type != "cpu" or dtype != torch.float32:
        return False
    for layer in layers:
        if isinstance(layer, ObservationEncoder):
            if layer.kind != "Box":
                return False
        elif type(layer) is nn.Linear:
            if layer.bias is None or layer.weight.device.type != "cpu" or layer.weight.dtype != torch.float32:
                return False
        elif type(layer) not in activations:
            return False
    return True


class FlatParameters:
    """Makes `parameters` (and their gradients) views into one contiguous tensor, `self.param`.

    The optimizer and gradient clipping then handle one tensor instead of one per layer. With small
    networks on a CPU, those per-tensor calls cost as much as the maths (about a third of a PPO
    minibatch update for 64x64 MLPs). Gradients accumulate in place into the views, so zero them with
    `zero_grad()` (never by setting them to None), and move the module to its device before this.
    Parameters that are never trained (a target network) take `gradients=False`.
    """

    def __init__(self, parameters, gradients: bool = True):
        parameters = list(parameters)
        self.param = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in parameters]), requires_grad=gradients)
        if gradients:
            self.param.grad = torch.zeros_like(self.param)
        offset = 0
        for p in parameters:
            size = p.numel()
            p.data = self.param.data[offset:offset + size].view_as(p)
            if gradients:
                p.grad = self.param.grad[offset:offset + size].view_as(p)
            offset += size

    def zero_grad(self) -> None:
        self.param.grad.zero_()


@torch.no_grad()
def clip_grad_norm(flats: list[FlatParameters], max_norm: float) -> torch.Tensor:
    """`nn.utils.clip_grad_norm_` over the gradients of `flats`, with the same arithmetic in a few tensor
    ops (the general version costs as much as a third of a small network's backward pass)."""
    grads = [flat.param.grad for flat in flats]
    norms = [torch.linalg.vector_norm(grad) for grad in grads]
    total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
    if total.device.type == "cpu":  # a Python number is cheaper than four tensor ops (on a GPU it would sync)
        scale = min(1.0, max_norm / (float(total) + 1e-6))
        if scale == 1.0:
            return total
    else:
        scale = (max_norm / (total + 1e-6)).clamp_(max=1.0)
    for grad in grads:
        grad.mul_(scale)
    return total


def check_flat_groups(optimizer: torch.optim.Optimizer) -> None:
    if any(len(group["params"]) != 1 for group in optimizer.param_groups):
        raise ValueError(f"{type(optimizer).__name__} takes parameter groups of one flat tensor each")


def needs_torchs_step(optimizer: torch.optim.Optimizer, closure) -> bool:
    """A closure, or a first step (which creates the state as torch does), goes through torch's step()."""
    return closure is not None or any(not optimizer.state[group["params"][0]] for group in optimizer.param_groups)


class FlatAdam(torch.optim.Adam):
    """torch's fused Adam for parameter groups of one flat tensor each (`FlatParameters`), stepping each
    group with one direct kernel call.

    For small networks on a CPU, `torch.optim.Adam.step()` spends twice the kernel's own time in
    bookkeeping (hooks, grouping tensors by device). Same arithmetic, state and `state_dict` as
    `torch.optim.Adam(..., fused=True)`; the first step goes through torch to create the state.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr=lr, betas=betas, eps=eps, fused=True)
        check_flat_groups(self)

    @torch.no_grad()
    def step(self, closure=None):
        if needs_torchs_step(self, closure):
            return super().step(closure)
        for group in self.param_groups:
            param = group["params"][0]
            if param.grad is None:  # as in torch's step: a parameter without a gradient is left as it is
                continue
            state = self.state[param]
            state["step"] += 1
            beta1, beta2 = group["betas"]
            torch._fused_adam_([param], [param.grad], [state["exp_avg"]], [state["exp_avg_sq"]], [], [state["step"]],
                               amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2,
                               weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
        return None

    # torch wraps an optimizer's step() for profiling and step hooks unless it is marked as hooked; here
    # the wrapper would cost as much as the kernel (step hooks are not supported)
    step.hooked = True


class FlatRMSprop(torch.optim.RMSprop):
    """torch's RMSprop for parameter groups of one flat tensor each (`FlatParameters`), stepping each
    group with three in-place tensor calls.

    A2C takes a step every 40 env steps, so `torch.optim.RMSprop.step()`'s bookkeeping (about 140 us a
    call, ten times the arithmetic) is a noticeable part of its training time. Same arithmetic, state
    and `state_dict` as `torch.optim.RMSprop` without momentum, centering or weight decay.
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, foreach=False)
        check_flat_groups(self)

    @torch.no_grad()
    def step(self, closure=None):
        if needs_torchs_step(self, closure):
            return super().step(closure)
        for group in self.param_groups:
            param = group["params"][0]
            state = self.state[param]
            state["step"] += 1
            square_avg = state["square_avg"]
            square_avg.mul_(group["alpha"]).addcmul_(param.grad, param.grad, value=1 - group["alpha"])
            param.addcdiv_(param.grad, square_avg.sqrt().add_(group["eps"]), value=-group["lr"])
        return None

    step.hooked = True  # as FlatAdam: no profiling wrapper


class NumpyMLP:
    """A Linear/ReLU/Tanh MLP evaluated with numpy on views of its parameters, for acting a step at a time.

    The views share the parameters' memory, so in-place updates (optimizer steps, `load_state_dict`)
    show through at once; build this after anything that reassigns `.data` (such as `FlatParameters`).
    """

    def __init__(self, layers: list[nn.Module]):
        if not hand_paths_apply("cpu", torch.float32, layers) or not any(type(layer) is nn.Linear for layer in layers):
            raise ValueError("NumpyMLP takes CPU float32 Linear (with bias), ReLU and Tanh layers only")
        self.steps = [(layer.weight.detach().numpy().T, layer.bias.detach().numpy()) if type(layer) is nn.Linear
                      else type(layer) for layer in layers]

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        x = np.asarray(observations, dtype=np.float32).reshape(len(observations), -1)
        for step in self.steps:
            if step is nn.ReLU:
                x = np.maximum(x, 0, out=x)
            elif step is nn.Tanh:
                x = np.tanh(x, out=x)
            else:
                x = x @ step[0] + step[1]
        return x


def numpy_network(device: torch.device, encoder: ObservationEncoder, layers: list[nn.Module],
                  normalizes_observations: bool = False) -> NumpyMLP | None:
    """`layers` after `encoder` as a NumpyMLP for acting a step at a time, or None where acting goes
    through torch: where `hand_paths_apply` says no, or where observations are normalised with torch on
    the way in. Build it after the parameters are flat (it views them)."""
    usable = hand_paths_apply(device, torch.float32, [encoder, *layers]) and not normalizes_observations
    return NumpyMLP(layers) if usable and any(type(layer) is nn.Linear for layer in layers) else None


def plain_forward(linears: list[nn.Linear], x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Linear layers with a ReLU after each but the last: the output and each layer's input, which
    `plain_backward` needs."""
    inputs = []
    for i, layer in enumerate(linears):
        inputs.append(x)
        x = torch.addmm(layer.bias, x, layer.weight.t())
        if i < len(linears) - 1:
            x = x.relu_()
    return x, inputs


def plain_backward(linears: list[nn.Linear], inputs: list[torch.Tensor], gradient: torch.Tensor) -> None:
    """The backward pass of `plain_forward` for the output gradient `gradient`: writes each layer's
    weight and bias gradients into their `.grad` (overwriting them), with autograd's arithmetic."""
    for i in reversed(range(len(linears))):
        torch.mm(gradient.t(), inputs[i], out=linears[i].weight.grad)
        torch.sum(gradient, dim=0, out=linears[i].bias.grad)
        if i:  # back through the ReLU: zero where its output is not positive
            gradient = gradient @ linears[i].weight
            gradient = torch.ops.aten.threshold_backward.grad_input(gradient, inputs[i], 0, grad_input=gradient)


@torch.no_grad()
def td_loss_gradients(layers: list[nn.Module], features: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor,
                      weights: torch.Tensor | None, delta_clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """DQN's TD loss through a plain Linear/ReLU Q-network, and its gradients worked out by hand.

    For loss = mean(weights * L(Q(s, a) - target)), L the Huber loss with threshold `delta_clip`
    (squared error when 0), writes d loss / d parameter into each layer's `.grad` (overwriting it)
    and returns (per-sample losses, Q(s, a)): the same numbers as autograd in half the tensor calls.
    """
    linears = [layer for layer in layers if type(layer) is nn.Linear]  # each but the last feeds a ReLU
    x, inputs = plain_forward(linears, features)
    q = x.gather(1, actions.unsqueeze(1)).squeeze(1)
    error = q - targets
    if delta_clip > 0:
        per_sample = F.huber_loss(q, targets, delta=delta_clip, reduction="none")
        slope = error.clamp(-delta_clip, delta_clip)
    else:
        per_sample = error.square()
        slope = 2 * error
    if weights is not None:
        slope = slope * weights
    gradient = torch.zeros_like(x).scatter_(1, actions.unsqueeze(1), (slope / len(q)).unsqueeze(1))
    plain_backward(linears, inputs, gradient)
    return per_sample, q
