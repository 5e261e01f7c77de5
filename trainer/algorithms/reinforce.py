"""REINFORCE: Monte-Carlo policy gradient over whole episodes.

Williams 1992, "Simple statistical gradient-following algorithms for connectionist reinforcement
learning", https://doi.org/10.1007/BF00992696; Sutton et al. 2000, "Policy Gradient Methods for
Reinforcement Learning with Function Approximation". Each update uses complete episodes only: a batch
waits until `episodes_per_batch` episodes have finished (Lightning Bolts' version cuts episodes off at a
fixed batch size; docs/algorithms.md, REINFORCE).

    G_t  = sum_k gamma^k r_{t+k}            (reward-to-go, per episode)
    loss = -mean_t log pi(a_t | s_t) * G_t  (gradient ascent on the expected return)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from trainer.actor_critic import OBSERVATION_SPACES, ActorCritic, PolicyGradientAgent
from trainer.agent import never
from trainer.buffers import EpisodeBuffer, Episode, discounted_returns
from trainer.distributions import ACTION_SPACES
from trainer.envs import finished_episodes
from trainer.networks import parse_hidden_layers
from trainer.params import param, processes_param, vectorization_param
from trainer.registry import AlgorithmSpec, POLICY_GRADIENT


@dataclass
class ReinforceConfig:
    num_envs: int = param(4, "Environments stepped side by side; each contributes whole episodes.", low=1,
                          high=256)
    vectorization: str = vectorization_param()
    episodes_per_batch: int = param(8, "Finished episodes per update.", low=1, high=10_000)
    gamma: float = param(0.99, "Discount factor.", low=0, high=1)
    learning_rate: float = param(3e-3, "Adam learning rate.", low=0, low_inclusive=False, high=1, live=True)
    # (G - mean) / std over the batch: the variance trick of pytorch/examples#386; a flag, as in #971. Not the
    # others' normalize_rewards, which divides each reward by a running std of the discounted return
    normalize_batch_returns: bool = param(True, "Normalise the returns of each batch to zero mean, unit variance.")
    max_grad_norm: float = param(0.0, "Clip the gradient norm to this (0 turns clipping off).", low=0, live=True)
    hidden_layers: str = param("64,64", "Hidden layer sizes of the policy, comma-separated.")
    activation: str = param("tanh", "Hidden layer activation.", choices=("tanh", "relu"))
    log_std_init: float = param(0.0, "Initial log standard deviation of Gaussian policies (Box actions).",
                                low=-20, high=5)
    processes: int = processes_param()


class Reinforce(PolicyGradientAgent):
    name = "reinforce"
    value_heads = 0  # REINFORCE has no critic

    def build(self) -> None:
        c = self.config
        self.network = ActorCritic(self.observation_space, self.action_space, parse_hidden_layers(c.hidden_layers),
                                   c.activation, shared=self.value_heads == 0, value_heads=self.value_heads,
                                   log_std_init=c.log_std_init).to(self.device)
        self.optimizer = torch.optim.Adam(self.network.actor_parameters(), lr=c.learning_rate)
        self.modules = {"network": self.network}
        self.optimizers = {"optimizer": self.optimizer}
        self.build_normalizers(self.local_envs)

    def batch(self, episodes: list[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
        obs = torch.as_tensor(np.concatenate([e.obs for e in episodes]), device=self.device)
        actions = torch.as_tensor(np.concatenate([e.actions for e in episodes]), device=self.device)
        return obs, actions

    def policy_step(self, loss: torch.Tensor, samples: int) -> None:
        """One step on `loss`, a mean over `samples` steps; on several processes, over every process's samples."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.group.average_gradients(self.network.actor_parameters(), weight=samples)
        if self.config.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.network.actor_parameters(), self.config.max_grad_norm)
        self.optimizer.step()

    def update(self, episodes: list[Episode], should_stop=never) -> dict[str, float]:
        c = self.config
        obs, actions = self.batch(episodes)
        # reward-to-go of each episode on its own: nothing flows across an episode end
        returns = torch.as_tensor(np.concatenate([discounted_returns(e.rewards, c.gamma) for e in episodes]),
                                  device=self.device)
        if c.normalize_batch_returns:  # over the whole batch, every process's episodes
            returns = self.group.normalized(returns)
        distribution = self.network.distribution(obs)
        loss = -(distribution.log_prob(actions) * returns).mean()
        self.policy_step(loss, len(obs))
        with torch.no_grad():
            entropy = distribution.entropy().mean()
        return {"train/loss": float(loss.detach()), "train/entropy": float(entropy),
                "train/learning_rate": c.learning_rate, "train/batch_steps": len(obs)}

    def train(self, runner) -> None:
        c = self.config
        with self.training_envs(self.local_envs) as (envs, observations):
            buffer = EpisodeBuffer(self.local_envs)
            head = self.network.policy
            while True:
                with torch.no_grad():
                    actions = self.network.distribution(torch.as_tensor(observations, device=self.device)).sample()
                actions = actions.cpu().numpy()
                next_observations, rewards, terminated, truncated, infos = envs.step(head.to_env(actions))
                buffer.add(observations, actions, rewards, terminated, truncated, infos.get("final_obs"))
                for episode_return, length in finished_episodes(infos):
                    runner.episode(episode_return, length)
                observations = next_observations
                keep_going = runner.advance(envs.num_envs * self.group.size)  # every process steps as many
                # an episode still running at an update finishes under the updated policy; its log-probs are
                # computed afresh at its own update, so no cut-off piece of it is ever used. On several processes
                # the batch is every process's finished episodes, once there are enough and each has one.
                finished = self.group.counts(len(buffer.finished))
                if sum(finished) >= c.episodes_per_batch and min(finished) > 0:
                    runner.record(self.update(buffer.take(), runner.should_stop))
                if not keep_going:
                    return


SPEC = AlgorithmSpec(
    name="reinforce",
    family=POLICY_GRADIENT,
    description="REINFORCE: Monte-Carlo policy gradient over whole episodes (Williams 1992).",
    config_class=ReinforceConfig,
    agent_class=Reinforce,
    observation_spaces=OBSERVATION_SPACES,
    action_spaces=ACTION_SPACES,
)
