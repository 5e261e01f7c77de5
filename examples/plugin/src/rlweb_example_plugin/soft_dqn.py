"""Soft DQN: DQN with the entropy-regularised (soft) Bellman target, acting by a Boltzmann policy.

Haarnoja et al. 2017, "Reinforcement Learning with Deep Energy-Based Policies", https://arxiv.org/abs/1702.08165
(soft Q-learning), in its discrete-action form (Schulman et al. 2017, "Equivalence Between Policy Gradients and
Soft Q-Learning", https://arxiv.org/abs/1704.06440):

    V(s')  = T * logsumexp_a' Q_target(s', a') / T      (the soft value: a max that keeps every action's worth)
    target = r + gamma^m * V(s')                         (no bootstrap past a true terminal state)
    pi(a|s) = softmax_a Q(s, a) / T                      (the policy it trains and explores with)

Everything else (the replay buffer, the target network and its updates, the training phases, epsilon, the
runner's evaluation, checkpoints, cancel and live changes) is DQN's, imported from trainer: a plugin builds on
trainer's shared parts as the built-in algorithms do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trainer.algorithms.dqn import DQN, DQNConfig
from trainer.params import param
from trainer.registry import DQN_FAMILY, AlgorithmSpec


@dataclass
class SoftDQNConfig(DQNConfig):
    # the entropy temperature: 0 would be DQN's hard max; larger values act and bootstrap more uniformly. The bonus
    # is worth up to T log(actions) a step: kept below the rewards' scale, or dawdling pays more than arriving
    temperature: float = param(0.005, "Entropy temperature T of the soft value and the Boltzmann policy.", low=0,
                               low_inclusive=False, high=100, live=True)

    def check(self) -> dict[str, str]:
        errors = super().check()
        if self.categorical:
            errors["categorical"] = "soft DQN bootstraps from Q values, not from a return distribution"
        return errors


class SoftDQN(DQN):
    name = "soft-dqn"

    def targets(self, batch) -> torch.Tensor:
        c = self.config
        # gamma^m, and no bootstrap past a true terminal state; a truncated episode is bootstrapped
        bootstrap = batch.discounts * (1.0 - batch.terminated)
        with torch.no_grad():
            next_q = self.target_network(batch.next_obs)
            soft_value = c.temperature * torch.logsumexp(next_q / c.temperature, dim=1)
            return batch.rewards + bootstrap * soft_value

    def boltzmann_actions(self, observations: np.ndarray) -> np.ndarray:
        """a ~ softmax(Q(s, .) / T), per observation."""
        with torch.inference_mode():
            q = self.q_values(self.q_network, torch.as_tensor(observations, device=self.device))
            return torch.distributions.Categorical(logits=q / self.config.temperature).sample().cpu().numpy()

    def explore(self, observations: np.ndarray, epsilons: np.ndarray) -> np.ndarray:
        """The Boltzmann policy, with DQN's epsilon on top (its schedule starts at 0.2 here: the policy explores)."""
        explore = self.rng.random(len(observations)) < epsilons
        return np.where(explore, self.rng.integers(0, self.action_space.n, size=len(observations)),
                        self.boltzmann_actions(observations))

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        if deterministic:  # evaluation: the greedy action
            return super().act(observations, deterministic=True)
        return self.boltzmann_actions(observations) + int(self.action_space.start)


SPEC = AlgorithmSpec(
    name="soft-dqn",
    family=DQN_FAMILY,
    description="Soft DQN: the entropy-regularised Bellman target and a Boltzmann policy (Haarnoja et al. 2017); "
                "an example plugin.",
    config_class=SoftDQNConfig,
    agent_class=SoftDQN,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"),
    action_spaces=("Discrete",),
    presets=(("learning_starts", 100), ("train_frequency", 4), ("gradient_steps", 1), ("buffer_size", 10_000),
             ("hidden_layers", "64,64"), ("exploration_initial_eps", 0.2), ("exploration_final_eps", 0.0)),
)
