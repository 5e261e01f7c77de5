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
