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


class SavedAsOne:
    """Several optimizers that a checkpoint saves and loads as one, their parameter groups in order.

    SAC and TD3 step their critic and their actor with separate optimizers; saved as one, their
    checkpoints keep the layout of the single optimizer with one group per network that they were
    written with before, so checkpoints from either version load into the other. Only what a checkpoint
    needs: `param_groups`, `state`, `state_dict()` and `load_state_dict()`.
    """

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    @property
    def state(self) -> dict:
        return {param: state for optimizer in self.optimizers for param, state in optimizer.state.items()}

    def state_dict(self) -> dict:
        """One state dict, each optimizer's parameter indices shifted past the ones before it."""
        state, groups, offset = {}, [], 0
        for optimizer in self.optimizers:
            own = optimizer.state_dict()
            state.update({offset + index: slots for index, slots in own["state"].items()})
            groups += [{**group, "params": [offset + index for index in group["params"]]}
                       for group in own["param_groups"]]
            offset += sum(len(group["params"]) for group in own["param_groups"])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"the state has {len(groups)} parameter groups, the optimizers {len(self.param_groups)}")
        for optimizer in self.optimizers:
            own, groups = groups[:len(optimizer.param_groups)], groups[len(optimizer.param_groups):]
            indices = [index for group in own for index in group["params"]]
            renumbered = {index: number for number, index in enumerate(indices)}
            optimizer.load_state_dict({
                "state": {renumbered[index]: state_dict["state"][index] for index in indices
                          if index in state_dict["state"]},
                "param_groups": [{**group, "params": [renumbered[index] for index in group["params"]]}
                                 for group in own]})
