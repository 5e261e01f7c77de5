"""Deep Deterministic Policy Gradient, and TD3 as a preset of it.

DDPG: Lillicrap et al. 2015, https://arxiv.org/abs/1509.02971. TD3: Fujimoto et al. 2018, "Addressing
Function Approximation Error in Actor-Critic Methods", https://arxiv.org/abs/1802.09477: twin Q
(`twin_q`), target policy smoothing (`target_noise`, `target_noise_clip`) and delayed policy and target
updates (`delay_policy_update`), which the `td3` registry entry turns on. The options follow rlib's DDPG,
under the names every algorithm here shares (rlib's `mu_lr`, `q_lr` and `num_updates_per_iter` are aliases). Actions are learned in [-1, 1], so every noise is in units of the half-range
of each action dimension (docs/algorithms.md, DDPG and TD3 checklist).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from trainer.continuous import (PRECISIONS, ActionScaler, Normalizers, OffPolicyActorCritic, OrnsteinUhlenbeckNoise,
                                QEnsemble, autocast, check_continuous_env, frozen, polyak_update)
from trainer.cpu_speed import FlatAdam, FlatParameters, clip_grad_norm
from trainer.networks import ObservationEncoder, mlp, parse_hidden_layers, run_layers
from trainer.optimizers import SavedAsOne
from trainer.params import param, vectorization_param
from trainer.registry import AlgorithmSpec, CONTINUOUS_CONTROL
from trainer.schedules import SCHEDULES, annealed


@dataclass
class DDPGConfig:
    """Defaults are rl-baselines3-zoo's tuned Pendulum-v1 settings for DDPG (-152 +- 94 at 20k env
    steps); the td3 entry changes only the TD3 options (zoo TD3: -152 +- 90 at 20k)."""

    policy_learning_rate: float = param(1e-3, "Adam learning rate of the actor.", low=0,
                                        low_inclusive=False, high=1, live=True)
    critic_learning_rate: float = param(1e-3, "Adam learning rate of the critics.", low=0,
                                        low_inclusive=False, high=1, live=True)
    lr_schedule: str = param("constant", "Both learning rates over the run: linear decay to 0, or constant.",
                             choices=SCHEDULES)
    buffer_size: int = param(200_000, "Replay buffer capacity, in transitions.", low=1, high=50_000_000)
    learning_starts: int = param(10_000, "Env steps of uniformly random actions before learning starts.", low=0)
    batch_size: int = param(256, "Transitions per gradient update.", low=1, high=65_536)
    gamma: float = param(0.98, "Discount factor.", low=0, high=1)
    tau: float = param(0.005, "Polyak averaging rate of the target networks.", low=0,
                       low_inclusive=False, high=1, live=True)
    train_frequency: int = param(1, "Env steps between training phases.", low=1)
    gradient_steps: int = param(1, "Critic updates per training phase (at most 100 per env step: 100 x "
                                   "train_frequency).", low=1, high=100_000)
    # exploration at collection time, in units of the action half-range, clipped to the bounds
    action_noise: float = param(0.1, "Std of the exploration noise added to the actor's actions, as a "
                                     "fraction of the action half-range.", low=0, live=True)
    noise_type: str = param("gaussian", "Exploration noise: gaussian, or ornstein-uhlenbeck (temporally "
                                         "correlated, for MountainCarContinuous).",
                            choices=("gaussian", "ornstein-uhlenbeck"))
    twin_q: bool = param(False, "Two critics; targets use the smaller (TD3).")
    # per sample, scaled like the actions, clipped, then the noisy action clamped to the bounds
    target_noise: float = param(0.0, "Std of the target policy smoothing noise, as a fraction of the action "
                                     "half-range (0 turns smoothing off; TD3 uses 0.2).", low=0, live=True)
    target_noise_clip: float = param(0.5, "Clip the target smoothing noise to +- this.", low=0, live=True)
    delay_policy_update: int = param(1, "Critic updates per actor and target update (TD3 uses 2).", low=1)
    hidden_layers: str = param("400,300", "Hidden layer sizes of the actor and of each critic, comma-separated.")
    max_grad_norm: float = param(0.0, "Clip each network's gradient norm to this (0 turns clipping off).", low=0,
                                 live=True)
    normalize_observations: bool = param(False, "Normalise Box observations with running mean and std "
                                               "(MuJoCo-style tasks).")
    normalize_rewards: bool = param(False, "Scale rewards by the running std of the discounted return.")
    num_envs: int = param(1, "Environments stepped side by side.", low=1, high=256)
    vectorization: str = vectorization_param()
    precision: str = param("float32", "Matrix products of the updates in float32, or in bfloat16 (mixed "
                                      "precision: faster on CPUs with AVX512-BF16 or AMX and on recent GPUs, "
                                      "several times slower on CPUs without them; weights and losses stay "
                                      "float32).", choices=PRECISIONS)

    def check(self) -> dict[str, str]:
        errors = {}
        return errors


class DeterministicActor(nn.Module):
    """mu(s) in [-1, 1]."""

    def __init__(self, observation_space, action_size: int, hidden_layers: tuple[int, ...]):
        super().__init__()
        self.encoder = ObservationEncoder(observation_space)
        self.body = mlp(self.encoder.output_size, hidden_layers, action_size)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.tanh(run_layers(self.body, self.encoder(observations)).float())  # float32 under autocast


def smoothed_target_actions(actions: torch.Tensor, noise: float, noise_clip: float) -> torch.Tensor:
    """TD3's target policy smoothing: a' = clamp(mu'(s') + clip(N(0, noise), -c, c), -1, 1), with the
    noise drawn for every sample and dimension (cleanrl#279), in [-1, 1] units so it scales with each
    dimension's range, and the result clamped to the bounds (AgileRL#240)."""
    epsilon = (torch.randn_like(actions) * noise).clamp(-noise_clip, noise_clip)
    return (actions + epsilon).clamp(-1.0, 1.0)


class DDPG(OffPolicyActorCritic):
    """Collects and trains in `OffPolicyActorCritic.train`, exploring with noise added to mu(s)."""

    name = "ddpg"

    def build(self) -> None:
        c = self.config
        layers = parse_hidden_layers(c.hidden_layers)
        self.scaler = ActionScaler(self.action_space)
        self.action_size = action_size = int(np.prod(self.action_space.shape))
        num_q = 2 if c.twin_q else 1
        self.actor = DeterministicActor(self.observation_space, action_size, layers).to(self.device)
        self.target_actor = DeterministicActor(self.observation_space, action_size, layers).to(self.device)
        self.critic = QEnsemble(self.observation_space, action_size, layers, num_q).to(self.device)
        self.target_critic = QEnsemble(self.observation_space, action_size, layers, num_q).to(self.device)
        self.target_actor.load_state_dict(self.actor.state_dict())
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_actor.requires_grad_(False)
        self.target_critic.requires_grad_(False)
        # one optimizer per network: the critic steps every update, the actor every `delay_policy_update`;
        # each network's parameters are views into one flat tensor (one fused kernel call per step, one
        # lerp_ per target network)
        self.actor_flat = FlatParameters(self.actor.parameters())
        self.critic_flat = FlatParameters(self.critic.parameters())
        self.target_flats = [FlatParameters(self.target_actor.parameters(), gradients=False),
                             FlatParameters(self.target_critic.parameters(), gradients=False)]
        adam = FlatAdam if self.device.type in ("cpu", "cuda") else torch.optim.Adam
        self.actor_optimizer = adam([self.actor_flat.param], lr=c.policy_learning_rate)
        self.critic_optimizer = adam([self.critic_flat.param], lr=c.critic_learning_rate)
        self.modules = {"actor": self.actor, "critic": self.critic, "target_actor": self.target_actor,
                        "target_critic": self.target_critic}
        # saved as the one optimizer of earlier versions (actor, critic groups): old checkpoints load
        self.optimizers = {"optimizer": SavedAsOne(self.actor_optimizer, self.critic_optimizer)}
        self.normalizers = Normalizers(self.observation_space, c.num_envs, c.gamma, c.normalize_observations,
                                       c.normalize_rewards, self.device)
        self.critic_updates = 0
        self.actor_updates = 0
        self.ou_noise: OrnsteinUhlenbeckNoise | None = None  # made by train()

    def learning_rate_groups(self) -> dict[str, list[dict]]:
        return {"policy_learning_rate": self.actor_optimizer.param_groups,
                "critic_learning_rate": self.critic_optimizer.param_groups}

    def live_changed(self, names: set[str]) -> None:
        """A new action_noise is the Ornstein-Uhlenbeck process's scale too, from its next step."""
        if "action_noise" in names and self.ou_noise is not None:
            self.ou_noise.sigma = self.config.action_noise

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        actions = self.act_unit(observations)
        if not deterministic and self.config.action_noise > 0:
            actions = actions + self.config.action_noise * self.rng.standard_normal(actions.shape)
        return self.scaler.to_env(actions)

    def act_unit(self, observations: np.ndarray) -> np.ndarray:
        """mu(s) in [-1, 1], without exploration noise."""
        with torch.no_grad():
            return self.actor(self.normalizers.obs(torch.as_tensor(observations, device=self.device))).cpu().numpy()

    def update(self, batch) -> dict[str, torch.Tensor]:
        """One step of the critics; every `delay_policy_update` critic steps, one of the actor against the
        updated critics, then the targets (Fujimoto et al.'s algorithm, as stable-baselines3 and CleanRL)."""
        c = self.config
        obs, next_obs = self.normalizers.obs(batch.obs), self.normalizers.obs(batch.next_obs)

        # critics: minimise sum_i mean (Q_i(s, a) - target)^2
        with autocast(self.device, c.precision):  # the forward passes; backward follows their dtypes
            target = self.targets(batch, next_obs)
            q = self.critic(obs, batch.actions)  # [num_q, batch]
            critic_loss = ((q - target) ** 2).mean(dim=1).sum()
        self.critic_flat.zero_grad()
        critic_loss.backward()
        if c.max_grad_norm > 0:
            clip_grad_norm([self.critic_flat], c.max_grad_norm)
        self.critic_optimizer.step()
        self.critic_updates += 1
        metrics = {"train/critic_loss": critic_loss.detach(), "train/q_mean": q.detach().mean()}
        if self.critic_updates % c.delay_policy_update != 0:
            return metrics

        # actor: maximise Q_1(s, mu(s)) through the updated critic, frozen; through Q_1 only (Fujimoto et
        # al.): the second critic is not evaluated
        with autocast(self.device, c.precision), frozen(self.critic):
            actor_loss = -self.critic(obs, self.actor(obs), members=1)[0].mean()
        self.actor_flat.zero_grad()
        actor_loss.backward()
        if c.max_grad_norm > 0:
            clip_grad_norm([self.actor_flat], c.max_grad_norm)
        self.actor_optimizer.step()
        self.actor_updates += 1
        polyak_update([flat.param for flat in self.target_flats], [self.actor_flat.param, self.critic_flat.param],
                      c.tau)  # the targets move with the actor (TD3)
        return metrics | {"train/actor_loss": actor_loss.detach()}

    def targets(self, batch, next_obs: torch.Tensor) -> torch.Tensor:
        """r + gamma (1 - terminated) min_i Q'_i(s', a'), a' from the target actor, smoothed when
        target_noise > 0; truncated transitions are bootstrapped (P1)."""
        c = self.config
        rewards = batch.rewards * self.normalizers.reward_scale() if c.normalize_rewards else batch.rewards
        with torch.no_grad():
            next_actions = self.target_actor(next_obs)
            if c.target_noise > 0:
                next_actions = smoothed_target_actions(next_actions, c.target_noise, c.target_noise_clip)
            next_q = self.target_critic(next_obs, next_actions).min(dim=0).values
            return rewards + c.gamma * (1.0 - batch.terminated) * next_q

    def start_exploring(self, envs) -> None:
        self.ou_noise = OrnsteinUhlenbeckNoise(self.config.num_envs, self.action_size, self.config.action_noise)

    def exploring_actions(self, observations: np.ndarray) -> np.ndarray:
        """mu(s) plus Gaussian or Ornstein-Uhlenbeck noise, clipped to the bounds."""
        c = self.config
        actions = self.act_unit(observations)
        if c.noise_type == "ornstein-uhlenbeck":
            actions = actions + self.ou_noise.sample(self.rng)
        elif c.action_noise > 0:
            actions = actions + c.action_noise * self.rng.standard_normal(actions.shape)
        return np.clip(actions, -1.0, 1.0).astype(np.float32)  # exploration stays within the bounds

    def episode_ended(self, index: int) -> None:
        self.ou_noise.reset(index)

    def before_updates(self, progress: float) -> dict:
        """Both learning rates follow the schedule, if any."""
        c = self.config
        if c.lr_schedule == "constant":
            return {}
        self.actor_optimizer.param_groups[0]["lr"] = annealed(c.policy_learning_rate, c.lr_schedule, progress)
        critic_rate = annealed(c.critic_learning_rate, c.lr_schedule, progress)
        self.critic_optimizer.param_groups[0]["lr"] = critic_rate
        return {"train/learning_rate": critic_rate}

    def extra_state(self) -> dict:
        return {"critic_updates": self.critic_updates, "actor_updates": self.actor_updates,
                "normalizers": self.normalizers.state()}

    def load_extra_state(self, state: dict) -> None:
        self.critic_updates = int(state.get("critic_updates", 0))
        self.actor_updates = int(state.get("actor_updates", 0))
        self.normalizers.load_state(state.get("normalizers") or {})


class TD3(DDPG):
    name = "td3"


_SPACES = dict(observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"), action_spaces=("Box",))

DDPG_SPEC = AlgorithmSpec(
    name="ddpg",
    family=CONTINUOUS_CONTROL,
    description="Deep Deterministic Policy Gradient: deterministic actor, Q critic, exploration noise "
                "(Lillicrap et al. 2015).",
    config_class=DDPGConfig,
    agent_class=DDPG,
    check_env=check_continuous_env,
    **_SPACES,
)

TD3_SPEC = AlgorithmSpec(
    name="td3",
    family=CONTINUOUS_CONTROL,
    description="TD3: DDPG with twin Q, target policy smoothing and delayed policy updates "
                "(Fujimoto et al. 2018).",
    config_class=DDPGConfig,
    agent_class=TD3,
    presets=(("twin_q", True), ("target_noise", 0.2), ("delay_policy_update", 2)),
    check_env=check_continuous_env,
    **_SPACES,
)
