"""Vanilla Policy Gradient: REINFORCE with a baseline and an entropy bonus, over several envs.

Sutton et al. 2000, "Policy Gradient Methods for Reinforcement Learning with Function Approximation";
after Lightning Bolts' VanillaPolicyGradient (average-reward baseline; its `entropy_beta` is our `entropy_coef`).
Whole episodes as in REINFORCE (the same loop), then

    A_t  = G_t - b(s_t)                         b: a learned V(s) (detached), the batch's mean return, or 0
    loss = -mean_t log pi(a_t | s_t) * A_t - entropy_coef * H(pi(. | s_t))
    V    is fitted to G_t with its own optimizer, `value_steps` steps per batch

With the learned baseline, an episode cut short by a time limit is bootstrapped: its returns include
gamma^k V(last observation) (docs/algorithms.md, P1). Without a critic nothing is bootstrapped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trainer.actor_critic import OBSERVATION_SPACES
from trainer.agent import never
from trainer.algorithms.reinforce import Reinforce, ReinforceConfig
from trainer.buffers import Episode, discounted_returns
from trainer.distributions import ACTION_SPACES
from trainer.params import param
from trainer.registry import AlgorithmSpec, POLICY_GRADIENT


@dataclass
class VPGConfig(ReinforceConfig):
    baseline: str = param("value", "Baseline subtracted from the returns: a learned value function, the batch's "
                                   "mean return (Bolts), or none.", choices=("value", "mean", "none"))
    entropy_coef: float = param(0.01, "Entropy bonus coefficient.", low=0, high=10, live=True)
    critic_learning_rate: float = param(1e-2, "Adam learning rate of the value function.", low=0,
                                       low_inclusive=False, high=1, live=True)
    value_steps: int = param(5, "Gradient steps on the value function per batch.", low=1, high=1_000)
    normalize_batch_returns: bool = param(False, "Normalise the returns of each batch before the baseline (the "
                                                 "value function then learns normalised returns).")
    normalize_advantage: bool = param(True, "Normalise the advantages of each batch.")


class VPG(Reinforce):
    name = "vpg"
    value_heads = 1

    def build(self) -> None:
        super().build()
        self.value_optimizer = torch.optim.Adam(self.network.critic_parameters(), lr=self.config.critic_learning_rate)
        self.optimizers["value_optimizer"] = self.value_optimizer

    def learning_rate_groups(self) -> dict[str, list[dict]]:
        return {"learning_rate": self.optimizer.param_groups, "critic_learning_rate": self.value_optimizer.param_groups}

    def returns(self, episodes: list[Episode]) -> np.ndarray:
        c = self.config
        parts = []
        for episode in episodes:
            bootstrap = 0.0
            if c.baseline == "value" and not episode.terminated and episode.final_obs is not None:
                with torch.no_grad():  # cut by a time limit: the episode would have gone on
                    final = torch.as_tensor(np.asarray(episode.final_obs)[None], device=self.device)
                    bootstrap = float(self.network.values(final)[0, 0])
            parts.append(discounted_returns(episode.rewards, c.gamma, bootstrap))
        return np.concatenate(parts)

    def update(self, episodes: list[Episode], should_stop=never) -> dict[str, float]:
        c = self.config
        obs, actions = self.batch(episodes)
        returns = torch.as_tensor(self.returns(episodes), device=self.device)
        if c.normalize_batch_returns:  # over the whole batch, every process's episodes
            returns = self.group.normalized(returns)
        distribution = self.network.distribution(obs)
        if c.baseline == "value":
            with torch.no_grad():  # the baseline must not carry the policy's gradient
                baseline = self.network.values(obs)[:, 0]
        elif c.baseline == "mean":
            baseline = self.group.mean(returns)
        else:
            baseline = torch.zeros(())
        advantages = returns - baseline
        if c.normalize_advantage:
            advantages = self.group.normalized(advantages)
        policy_loss = -(distribution.log_prob(actions) * advantages).mean()
        entropy = distribution.entropy().mean()
        loss = policy_loss - c.entropy_coef * entropy  # the bonus is subtracted: more entropy, lower loss
        self.policy_step(loss, len(obs))

        metrics = {"train/loss": float(loss.detach()), "train/policy_loss": float(policy_loss.detach()),
                   "train/entropy": float(entropy.detach()), "train/learning_rate": c.learning_rate,
                   "train/batch_steps": len(obs)}
        if c.baseline == "value":
            for _ in range(c.value_steps):
                if should_stop():  # a cancel ends the value fit within a second
                    break
                value_loss = ((self.network.values(obs)[:, 0] - returns) ** 2).mean()
                self.value_optimizer.zero_grad(set_to_none=True)
                value_loss.backward()
                self.group.average_gradients(self.network.critic_parameters(), weight=len(obs))
                self.value_optimizer.step()
            metrics["train/value_loss"] = float(value_loss.detach())
        return metrics


SPEC = AlgorithmSpec(
    name="vpg",
    family=POLICY_GRADIENT,
    description="Vanilla Policy Gradient: REINFORCE with a baseline and an entropy bonus (Sutton et al. 2000).",
    config_class=VPGConfig,
    agent_class=VPG,
    observation_spaces=OBSERVATION_SPACES,
    action_spaces=ACTION_SPACES,
)
