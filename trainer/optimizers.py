"""Optimizers that torch lacks."""

from __future__ import annotations

import torch


class RMSpropTFLike(torch.optim.Optimizer):
    """RMSprop as TensorFlow 1 (and so the original A2C and OpenAI baselines) computes it.

    Two differences from `torch.optim.RMSprop` (SB3's RMSpropTFLike, DLR-RM/stable-baselines3#110):
    epsilon is added inside the square root, and the running average of squared gradients starts at 1:

        v <- alpha * v + (1 - alpha) * g^2        (v starts at 1)
        p <- p - lr * g / sqrt(v + eps)
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                square_avg = state["square_avg"]
                square_avg.mul_(group["alpha"]).addcmul_(p.grad, p.grad, value=1 - group["alpha"])
                p.addcdiv_(p.grad, square_avg.add(group["eps"]).sqrt_(), value=-group["lr"])
        return loss


def check_flat_groups(optimizer: torch.optim.Optimizer) -> None:
    if any(len(group["params"]) != 1 for group in optimizer.param_groups):
        raise ValueError(f"{type(optimizer).__name__} takes parameter groups of one flat tensor each")


def needs_torchs_step(optimizer: torch.optim.Optimizer, closure) -> bool:
    """A closure, or a first step (which creates the state as torch does), goes through torch's step()."""
    return closure is not None or any(not optimizer.state[group["params"][0]] for group in optimizer.param_groups)


class FlatAdam(torch.optim.Adam):
    """torch's fused Adam for parameter groups of one flat tensor each (`trainer.networks.FlatParameters`),
    stepping each group with one direct kernel call.

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
    """torch's RMSprop for parameter groups of one flat tensor each (`trainer.networks.FlatParameters`),
    stepping each group with three in-place tensor calls.

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
