"""Soft Actor-Critic with automatic entropy tuning.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications", https://arxiv.org/abs/1812.05905.
A tanh-squashed Gaussian actor, twin Q critics with Polyak-averaged targets, and a temperature alpha
tuned towards a target entropy (or fixed). Actions are learned in [-1, 1] and rescaled to the env's
bounds, so the squashing's log-prob correction never sees the scale (docs/algorithms.md, SAC checklist).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainer.continuous import (PRECISIONS, ActionScaler, ColoredNoise, Normalizers, OffPolicyActorCritic, QEnsemble,
                                autocast, check_continuous_env, episode_length_limit, frozen)
from trainer.cpu_speed import FlatAdam, FlatParameters, clip_grad_norm
from trainer.networks import ObservationEncoder, mlp, parse_hidden_layers, run_layers
from trainer.optimizers import SavedAsOne
from trainer.params import param, vectorization_param
from trainer.registry import AlgorithmSpec, CONTINUOUS_CONTROL

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # as SB3 and Spinning Up
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class SACConfig:
    """Defaults are rl-baselines3-zoo's tuned Pendulum-v1 settings (-157 +- 89 at 20k env steps)."""

    policy_learning_rate: float = param(1e-3, "Adam learning rate of the actor.", low=0, low_inclusive=False,
                                        high=1, live=True)
    critic_learning_rate: float = param(1e-3, "Adam learning rate of the Q critics.", low=0, low_inclusive=False,
                                        high=1, live=True)
    alpha_learning_rate: float = param(1e-3, "Adam learning rate of log(alpha) when alpha is tuned.", low=0,
                                       low_inclusive=False, high=1, live=True)
    buffer_size: int = param(1_000_000, "Replay buffer capacity, in transitions.", low=1, high=50_000_000)
    # warm start: uniformly random actions fill the buffer before the first update
    learning_starts: int = param(100, "Env steps of uniformly random actions before learning starts.", low=0)
    batch_size: int = param(256, "Transitions per gradient update.", low=1, high=65_536)
    gamma: float = param(0.99, "Discount factor.", low=0, high=1)
    tau: float = param(0.005, "Polyak averaging rate of the target critics.", low=0, low_inclusive=False, high=1,
                       live=True)
    target_update_interval: int = param(1, "Gradient updates between target-critic updates.", low=1)
    train_frequency: int = param(1, "Env steps between training phases.", low=1)
    gradient_steps: int = param(1, "Gradient updates per training phase (at most 100 per env step: "
                                   "100 x train_frequency).", low=1, high=100_000)
    auto_alpha: bool = param(True, "Tune alpha towards the target entropy; off keeps alpha fixed.")
    alpha: float = param(1.0, "Entropy coefficient: its initial value when tuned, its value when fixed.", low=0,
                         low_inclusive=False, live=True)
    # "auto" is -dim(A), Haarnoja et al.'s heuristic
    target_entropy: str = param("auto", "Entropy alpha is tuned towards: a number, or auto for -(action dims).")
    hidden_layers: str = param("256,256", "Hidden layer sizes of the actor and of each critic, comma-separated.")
    max_grad_norm: float = param(0.0, "Clip each network's gradient norm to this (0 turns clipping off).", low=0,
                                 live=True)
    normalize_observations: bool = param(False, "Normalise Box observations with running mean and std.")
    normalize_rewards: bool = param(False, "Scale rewards by the running std of the discounted return.")
    num_envs: int = param(1, "Environments stepped side by side.", low=1, high=256)
    vectorization: str = vectorization_param()
    # 0 is standard SAC; pink noise (1) explores sparse tasks such as MountainCarContinuous (Eberhard et al. 2023)
    noise_exponent: float = param(0.0, "Colour of the exploration noise while collecting: 0 white (independent "
                                       "per step), 1 pink, 2 red (slowly wandering).", low=0, high=3)
    precision: str = param("float32", "Matrix products of the updates in float32, or in bfloat16 (mixed "
                                      "precision: faster on CPUs with AVX512-BF16 or AMX and on recent GPUs, "
                                      "several times slower on CPUs without them; weights and losses stay "
                                      "float32).", choices=PRECISIONS)

    def check(self) -> dict[str, str]:
        errors = {}
        if self.target_entropy.strip().lower() != "auto":
            try:
                if not math.isfinite(float(self.target_entropy)):
                    raise ValueError
            except ValueError:
                errors["target_entropy"] = "must be auto or a finite number, e.g. -1"
        return errors


def squashed_gaussian_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor,
                               scale: float | torch.Tensor = 1.0) -> torch.Tensor:
    """log density of a = scale * tanh(u), u ~ N(mean, exp(log_std)^2), summed over action dimensions.

    Change of variables: log pi(a) = log N(u) - sum log(scale * (1 - tanh(u)^2)), with
    log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) computed from u (stable; no atanh of a).
    """
    gaussian = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - LOG_SQRT_2PI).sum(-1)
    log_abs_det = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    log_scale = torch.log(torch.as_tensor(scale, dtype=u.dtype)).expand(u.shape[-1:]).sum()
    return gaussian - log_abs_det - log_scale


class SquashedGaussianActor(nn.Module):
    def __init__(self, observation_space, action_size: int, hidden_layers: tuple[int, ...]):
        super().__init__()
        self.encoder = ObservationEncoder(observation_space)
        self.body = mlp(self.encoder.output_size, hidden_layers, 2 * action_size)

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = run_layers(self.body, self.encoder(observations)).float()  # float32 under autocast
        mean, log_std = outputs.chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, observations: torch.Tensor,
               noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in [-1, 1] and its log-probability; `noise` replaces the standard
        normal draw (coloured exploration noise)."""
        mean, log_std = self(observations)
        u = mean + log_std.exp() * (torch.randn_like(mean) if noise is None else noise)
        return torch.tanh(u), squashed_gaussian_log_prob(u, mean, log_std)


class LogAlpha(nn.Module):
    """log(alpha) as a module, so a checkpoint saves it with the networks."""

    def __init__(self, alpha: float):
        super().__init__()
        self.value = nn.Parameter(torch.tensor(math.log(alpha)))


class SAC(OffPolicyActorCritic):
    """Collects and trains in `OffPolicyActorCritic.train`, exploring with its own samples."""

    name = "sac"

    def build(self) -> None:
        c = self.config
        layers = parse_hidden_layers(c.hidden_layers)
        self.scaler = ActionScaler(self.action_space)
        action_size = int(np.prod(self.action_space.shape))
        self.actor = SquashedGaussianActor(self.observation_space, action_size, layers).to(self.device)
        self.critic = QEnsemble(self.observation_space, action_size, layers, num_q=2).to(self.device)
        self.target_critic = QEnsemble(self.observation_space, action_size, layers, num_q=2).to(self.device)
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.log_alpha = LogAlpha(c.alpha).to(self.device)
        self.log_alpha.requires_grad_(c.auto_alpha)
        auto = c.target_entropy.strip().lower() == "auto"
        self.target_entropy = -float(action_size) if auto else float(c.target_entropy)
        # one optimizer per network, as the losses are minimised one after the other; each network's
        # parameters are views into one flat tensor, so a step is one fused kernel call
        self.actor_flat = FlatParameters(self.actor.parameters())
        self.critic_flat = FlatParameters(self.critic.parameters())
        self.target_flat = FlatParameters(self.target_critic.parameters(), gradients=False)
        adam = FlatAdam if self.device.type in ("cpu", "cuda") else torch.optim.Adam
        self.critic_optimizer = adam([self.critic_flat.param], lr=c.critic_learning_rate)
        self.actor_optimizer = adam([self.actor_flat.param], lr=c.policy_learning_rate)
        self.alpha_optimizer = adam([self.log_alpha.value], lr=c.alpha_learning_rate) if c.auto_alpha else None
        self.modules = {"actor": self.actor, "critic": self.critic, "target_critic": self.target_critic,
                        "log_alpha": self.log_alpha}
        # saved as the one optimizer of earlier versions (actor, critic, alpha groups): old checkpoints load
        self.optimizers = {"optimizer": SavedAsOne(self.actor_optimizer, self.critic_optimizer,
                                                   *([self.alpha_optimizer] if c.auto_alpha else []))}
        self.normalizers = Normalizers(self.observation_space, c.num_envs, c.gamma, c.normalize_observations,
                                       c.normalize_rewards, self.device)
        self.updates = 0  # gradient updates so far
        self.colored_noise: ColoredNoise | None = None  # made when training starts, if asked

    def learning_rate_groups(self) -> dict[str, list[dict]]:
        return {"policy_learning_rate": self.actor_optimizer.param_groups,
                "critic_learning_rate": self.critic_optimizer.param_groups,
                "alpha_learning_rate": self.alpha_optimizer.param_groups if self.alpha_optimizer else []}

    def live_changed(self, names: set[str]) -> None:
        """A new alpha is alpha from the next update on (when tuned, the tuning goes on from it)."""
        if "alpha" in names:
            with torch.no_grad():
                self.log_alpha.value.fill_(math.log(self.config.alpha))

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        return self.scaler.to_env(self.act_unit(observations, deterministic))

    def act_unit(self, observations: np.ndarray, deterministic: bool, noise: np.ndarray | None = None) -> np.ndarray:
        """Actions in [-1, 1], as stored in replay."""
        with torch.no_grad():
            obs = self.normalizers.obs(torch.as_tensor(observations, device=self.device))
            if deterministic:
                actions = torch.tanh(self.actor(obs)[0])
            else:
                noise = None if noise is None else torch.as_tensor(noise, device=self.device)
                actions = self.actor.sample(obs, noise)[0]
        return actions.cpu().numpy()

    def update(self, batch) -> dict[str, torch.Tensor]:
        """One step of the critics, then one of the actor and of alpha against the updated critics, in the
        order of Haarnoja et al.'s algorithm (and of stable-baselines3 and CleanRL)."""
        c = self.config
        obs, next_obs = self.normalizers.obs(batch.obs), self.normalizers.obs(batch.next_obs)
        alpha = self.log_alpha.value.detach().exp()

        # critics: minimise 0.5 sum_i mean (Q_i(s, a) - target)^2
        with autocast(self.device, c.precision):  # the forward passes; backward follows their dtypes
            target = self.targets(batch, next_obs, alpha)
            q = self.critic(obs, batch.actions)  # [2, batch]
            critic_loss = 0.5 * ((q - target) ** 2).mean(dim=1).sum()
        self.critic_flat.zero_grad()
        critic_loss.backward()
        if c.max_grad_norm > 0:
            clip_grad_norm([self.critic_flat], c.max_grad_norm)
        self.critic_optimizer.step()

        # actor: minimise alpha log pi(a|s) - min_i Q_i(s, a) with a reparameterised, through the updated
        # critics (frozen)
        with autocast(self.device, c.precision):
            actions, log_prob = self.actor.sample(obs)
            with frozen(self.critic):
                q_pi = self.critic(obs, actions).min(dim=0).values
            actor_loss = (alpha * log_prob - q_pi).mean()
        self.actor_flat.zero_grad()
        actor_loss.backward()
        if c.max_grad_norm > 0:
            clip_grad_norm([self.actor_flat], c.max_grad_norm)
        self.actor_optimizer.step()

        # temperature: alpha grows while the entropy -log pi is below the target, and shrinks above it
        if c.auto_alpha:
            alpha_loss = -(self.log_alpha.value * (log_prob.detach() + self.target_entropy)).mean()
            self.log_alpha.value.grad = None
            alpha_loss.backward()
            self.alpha_optimizer.step()

        self.updates += 1
        if self.updates % c.target_update_interval == 0:
            with torch.no_grad():
                self.target_flat.param.lerp_(self.critic_flat.param, c.tau)
        return {"train/critic_loss": critic_loss.detach(), "train/actor_loss": actor_loss.detach(),
                "train/alpha": alpha, "train/entropy": -log_prob.detach().mean(), "train/q_mean": q.detach().mean()}

    def targets(self, batch, next_obs: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s') from the
        current policy; truncated transitions are bootstrapped (P1)."""
        c = self.config
        rewards = batch.rewards * self.normalizers.reward_scale() if c.normalize_rewards else batch.rewards
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs)
            next_q = self.target_critic(next_obs, next_actions).min(dim=0).values
            return rewards + c.gamma * (1.0 - batch.terminated) * (next_q - alpha * next_log_prob)

    def start_exploring(self, envs) -> None:
        c = self.config
        if c.noise_exponent > 0:  # one sequence per sub-env, as long as an episode
            self.colored_noise = ColoredNoise(c.noise_exponent, c.num_envs, int(np.prod(self.action_space.shape)),
                                              episode_length_limit(envs), self.rng)

    def exploring_actions(self, observations: np.ndarray) -> np.ndarray:
        """a ~ pi(.|s), its noise white or coloured."""
        return self.act_unit(observations, False, self.colored_noise.sample() if self.colored_noise else None)

    def episode_ended(self, index: int) -> None:
        if self.colored_noise:
            self.colored_noise.reset(index)

    def extra_state(self) -> dict:
        return {"updates": self.updates, "normalizers": self.normalizers.state()}

    def load_extra_state(self, state: dict) -> None:
        self.updates = int(state.get("updates", 0))
        self.normalizers.load_state(state.get("normalizers") or {})


SPEC = AlgorithmSpec(
    name="sac",
    family=CONTINUOUS_CONTROL,
    description="Soft Actor-Critic: squashed Gaussian actor, twin Q critics, automatic entropy tuning "
                "(Haarnoja et al. 2018).",
    config_class=SACConfig,
    agent_class=SAC,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"),
    action_spaces=("Box",),
    check_env=check_continuous_env,
)
