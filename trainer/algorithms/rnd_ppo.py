"""PPO with Random Network Distillation: an exploration bonus for rarely seen observations.

Burda et al. 2018, "Exploration by Random Network Distillation", https://arxiv.org/abs/1810.12894;
details from CleanRL's ppo_rnd_envpool.py and the pitfalls in docs/algorithms.md (PPO + RND). Option names
follow pytorchrl's RND_PPO (`gamma_intrinsic`, `predictor_proportion`, `pre_normalization_steps`,
`pre_normalization_length`; its `ext_adv_coeff` and `int_adv_coeff` are accepted for our `ext_adv_coef` and
`int_adv_coef`, spelt as every other coefficient here).

A fixed, random target network f and a trained predictor g see the next observation, normalised by
their own running mean/std and clipped to [-5, 5] (not the policy's normalisation). Then

    r_int  = ||g(s') - f(s')||^2 / std(discounted intrinsic return)   (the squared error, its scale tracked
                                                                      by a never-reset forward filter)
    A      = ext_adv_coef * A_ext + int_adv_coef * A_int              (two value heads, two GAEs)

where the extrinsic return is episodic (and bootstrapped at truncations) and the intrinsic one is not:
it flows across episode ends with its own discount. The predictor learns on a random
`predictor_proportion` of each minibatch, so the bonus does not vanish too fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from trainer.actor_critic import OBSERVATION_SPACES, body, normalizable
from trainer.agent import never
from trainer.algorithms.ppo import PPO, PPOConfig, clipped_surrogate_loss, ratio_statistics, value_loss
from trainer.buffers import generalized_advantages
from trainer.distributions import ACTION_SPACES
from trainer.envs import finished_episodes
from trainer.cpu_speed import FlatAdam, FlatParameters
from trainer.networks import ObservationEncoder, parse_hidden_layers
from trainer.normalization import ObservationNormalizer, RewardNormalizer
from trainer.params import param
from trainer.registry import AlgorithmSpec, POLICY_GRADIENT

RND_OBS_CLIP = 5.0


@dataclass
class RNDPPOConfig(PPOConfig):
    """PPO's options, plus RND's; defaults from Burda et al. / CleanRL where they carry over to small tasks."""

    gamma: float = param(0.999, "Discount factor of the extrinsic return.", low=0, high=1)
    gamma_intrinsic: float = param(0.99, "Discount factor of the intrinsic (exploration) return.", low=0, high=1)
    ext_adv_coef: float = param(2.0, "Weight of the extrinsic advantage.", low=0, high=100)
    int_adv_coef: float = param(1.0, "Weight of the intrinsic advantage.", low=0, high=100)
    predictor_proportion: float = param(0.25, "Fraction of each minibatch the RND predictor learns from.", low=0,
                                        low_inclusive=False, high=1)
    # random-action warm-up of the RND observation statistics: steps x length vector steps (counted as env steps)
    pre_normalization_steps: int = param(10, "Rounds of random actions that initialise the RND observation "
                                             "statistics before training (0: none).", low=0, high=10_000)
    pre_normalization_length: int = param(32, "Vector steps per warm-up round.", low=1, high=100_000)
    rnd_hidden_layers: str = param("64,64", "Hidden layer sizes of the RND target and predictor networks.")
    rnd_output_size: int = param(64, "Size of the RND embedding the predictor learns to match.", low=1,
                                 high=65_536)


class RNDNetwork(nn.Module):
    """Observation -> embedding; one instance is the frozen random target, another the predictor."""

    def __init__(self, observation_space, hidden_layers: tuple[int, ...], output_size: int):
        super().__init__()
        self.encoder = ObservationEncoder(observation_space)
        self.body = body(self.encoder.output_size, hidden_layers, "relu")
        self.output = nn.Linear(hidden_layers[-1] if hidden_layers else self.encoder.output_size, output_size)
        for layer in [*self.body, self.output]:
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, np.sqrt(2))
                nn.init.zeros_(layer.bias)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.output(self.body(self.encoder(observations)))


class RNDPPO(PPO):
    name = "rnd-ppo"
    value_heads = 2  # extrinsic, intrinsic

    def build(self) -> None:
        super().build()
        c = self.config
        layers = parse_hidden_layers(c.rnd_hidden_layers)
        self.rnd_target = RNDNetwork(self.observation_space, layers, c.rnd_output_size).to(self.device)
        self.rnd_target.requires_grad_(False)
        self.rnd_predictor = RNDNetwork(self.observation_space, layers, c.rnd_output_size).to(self.device)
        self.predictor_flat = FlatParameters(self.rnd_predictor.parameters())
        self.predictor_optimizer = FlatAdam([self.predictor_flat.param], lr=c.learning_rate, eps=c.optimizer_epsilon)
        self.modules.update(rnd_target=self.rnd_target, rnd_predictor=self.rnd_predictor)
        self.optimizers["predictor_optimizer"] = self.predictor_optimizer
        # the RND inputs' own statistics (float Box observations only), and the intrinsic return's scale
        self.rnd_obs_normalizer = (ObservationNormalizer(self.observation_space.shape, clip=RND_OBS_CLIP)
                                   if normalizable(self.observation_space) else None)
        self.intrinsic_scale = RewardNormalizer(self.local_envs, c.gamma_intrinsic, clip=1e9)

    # --- state saved beside the weights ---------------------------------------------------------------------
    def running_statistics(self) -> list:
        rnd_obs = [self.rnd_obs_normalizer.stats] if self.rnd_obs_normalizer is not None else []
        return [*super().running_statistics(), *rnd_obs, self.intrinsic_scale.stats]

    def extra_state(self) -> dict:
        state = super().extra_state()
        state["intrinsic_scale"] = self.intrinsic_scale.state_dict()
        if self.rnd_obs_normalizer is not None:
            state["rnd_obs_normalizer"] = self.rnd_obs_normalizer.state_dict()
        return state

    def load_extra_state(self, state: dict) -> None:
        super().load_extra_state(state)
        if "intrinsic_scale" in state:
            self.intrinsic_scale.load_state_dict(state["intrinsic_scale"])
        if self.rnd_obs_normalizer is not None and "rnd_obs_normalizer" in state:
            self.rnd_obs_normalizer.load_state_dict(state["rnd_obs_normalizer"])

    # --- the exploration bonus ------------------------------------------------------------------------------
    def rnd_inputs(self, observations: torch.Tensor) -> torch.Tensor:
        if self.rnd_obs_normalizer is None:
            return observations
        mean, scale = (torch.as_tensor(array, device=self.device) for array in self.rnd_obs_normalizer.mean_and_scale())
        return ((observations - mean) * scale).clamp(-RND_OBS_CLIP, RND_OBS_CLIP)

    def novelty(self, next_observations: torch.Tensor) -> torch.Tensor:
        """The predictor's squared error on each observation (the raw intrinsic reward)."""
        inputs = self.rnd_inputs(next_observations)
        return ((self.rnd_predictor(inputs) - self.rnd_target(inputs)) ** 2).sum(-1)

    def intrinsic_rewards(self, buffer) -> None:
        """Fill `buffer.int_rewards`: the novelty of each real next observation, divided by the running std
        of the never-reset discounted intrinsic return (Burda et al.'s RewardForwardFilter)."""
        flat_next = torch.as_tensor(buffer.next_obs.reshape(-1, *buffer.next_obs.shape[2:]), device=self.device)
        with torch.no_grad():
            novelty = self.novelty(flat_next).cpu().numpy().reshape(buffer.num_steps, buffer.num_envs)
        never_done = np.zeros(buffer.num_envs, dtype=bool)
        for t in range(buffer.num_steps):  # update the return's statistics step by step, as collected
            self.intrinsic_scale.normalize(novelty[t], never_done, update=True)
        buffer.int_rewards[:] = self.intrinsic_scale.normalize(novelty, np.zeros_like(novelty, dtype=bool),
                                                               update=False)
        if self.rnd_obs_normalizer is not None:
            self.rnd_obs_normalizer.update(buffer.next_obs.reshape(-1, *buffer.next_obs.shape[2:]))

    def warm_up(self, runner, envs, observations: np.ndarray) -> tuple[np.ndarray, bool]:
        """Random actions that initialise the RND observation statistics, counted as env steps (P6).
        Returns the observations to go on from and whether to keep training."""
        c = self.config
        self.rnd_obs_normalizer.update(observations)
        for _ in range(c.pre_normalization_steps * c.pre_normalization_length):
            observations, _, terminated, truncated, infos = envs.step(envs.action_space.sample())
            real_next = observations.copy()
            for i in np.flatnonzero(terminated | truncated):
                real_next[i] = infos["final_obs"][i]
            self.rnd_obs_normalizer.update(real_next)
            for episode_return, length in finished_episodes(infos):
                runner.episode(episode_return, length)
            if not runner.advance(envs.num_envs * self.group.size):
                return observations, False
        return observations, True

    # --- PPO's update with two value heads and the predictor ------------------------------------------------
    def minibatch_loss(self, batch, clip_range: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's loss with a value loss per head, plus the predictor's loss on part of the minibatch (its
        own network and optimizer: the sum's gradient reaches each network from its own loss only)."""
        c = self.config
        distribution, values = self.network(batch.obs)
        log_probs = distribution.log_prob(batch.actions)
        # the weighted sum of both advantages, normalised per minibatch if asked
        policy_loss, log_ratio = clipped_surrogate_loss(log_probs, batch.log_probs, batch.advantages, clip_range)
        vf_clip = c.value_clip_range if c.clip_value_loss else None
        ext_value_loss = value_loss(values[:, 0], batch.values, batch.returns, vf_clip)
        int_value_loss = value_loss(values[:, 1], batch.int_values, batch.int_returns, vf_clip)
        entropy = distribution.entropy().mean()
        loss = policy_loss + c.value_coef * (ext_value_loss + int_value_loss) - c.entropy_coef * entropy
        # the predictor learns from a random part of the minibatch only (update_proportion in CleanRL)
        errors = self.novelty(batch.next_obs)
        mask = (torch.rand(len(errors), device=self.device) < c.predictor_proportion).float()
        predictor_loss = (errors * mask).sum() / mask.sum().clamp(min=1.0)
        approx_kl, clip_fraction = ratio_statistics(log_ratio, clip_range)
        return loss + predictor_loss, {
            "loss": loss, "policy_loss": policy_loss, "value_loss": ext_value_loss,
            "intrinsic_value_loss": int_value_loss, "entropy": entropy, "approx_kl": approx_kl,
            "clip_fraction": clip_fraction, "rnd_loss": predictor_loss}

    def update(self, buffer, progress: float, should_stop=never) -> dict[str, float]:
        """PPO's epochs over `minibatch_loss` (the network's gradient clipped, the predictor's not)."""
        metrics = super().update(buffer, progress, should_stop)
        metrics["train/intrinsic_reward"] = float(buffer.int_rewards.mean())
        return metrics

    def train(self, runner) -> None:
        c = self.config
        with self.training_envs(self.local_envs) as (envs, observations):
            buffer = self.new_buffer(c.n_steps, self.local_envs, intrinsic=True)
            if self.steps_done == 0 and self.rnd_obs_normalizer is not None:  # a fresh run, not a resumed one
                observations, keep_going = self.warm_up(runner, envs, observations)
                if not keep_going:
                    return
            observations = self.normalize_obs(observations, update=True)
            while True:
                observations, last_values, keep_going = self.collect(runner, envs, buffer, observations)
                if not buffer.full:
                    return
                self.intrinsic_rewards(buffer)
                # extrinsic: episodic, truncations bootstrapped (the buffer's own GAE)
                buffer.compute_advantages(last_values[:, 0], c.gamma, c.gae_lambda)
                ext_advantages = buffer.advantages
                # intrinsic: never-ending, so nothing stops at an episode end and V(next obs) always counts
                next_int_values = np.concatenate([buffer.int_values[1:], last_values[None, :, 1]], axis=0)
                no_ends = np.zeros_like(buffer.int_values)
                int_advantages, buffer.int_returns = generalized_advantages(
                    buffer.int_rewards, buffer.int_values, next_int_values, no_ends, no_ends,
                    c.gamma_intrinsic, c.gae_lambda)
                buffer.advantages = c.ext_adv_coef * ext_advantages + c.int_adv_coef * int_advantages
                runner.record(self.update(buffer, runner.progress, runner.should_stop))
                if not keep_going:
                    return


SPEC = AlgorithmSpec(
    name="rnd-ppo",
    family=POLICY_GRADIENT,
    description="PPO with Random Network Distillation: an exploration bonus from a predictor chasing a fixed "
                "random network (Burda et al. 2018).",
    config_class=RNDPPOConfig,
    agent_class=RNDPPO,
    observation_spaces=OBSERVATION_SPACES,
    action_spaces=ACTION_SPACES,
)
