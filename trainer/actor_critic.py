"""What the policy-gradient algorithms share: the actor-critic network, acting with normalised
observations, and the rollout loop of A2C, PPO and PPO with RND.

The network reads observations through `ObservationEncoder` (flat features, one-hots, or a CNN for
images), then an actor body and a critic body (separate MLPs by default, one trunk with `shared`),
a policy head from `trainer.distributions` and one linear value head per value function.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from trainer.agent import Agent
from trainer.buffers import RolloutBuffer
from trainer.distributions import CategoricalHead, policy_head
from trainer.envs import finished_episodes, real_next_observations
from trainer.cpu_speed import NumpyMLP, numpy_network
from trainer.networks import ObservationEncoder, run_layers
from trainer.normalization import ObservationNormalizer, RewardNormalizer

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
OBSERVATION_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


def body(input_size: int, hidden_sizes: tuple[int, ...], activation: str) -> nn.Sequential:
    """Linear + activation for each hidden size (an empty tuple passes the features through)."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [nn.Linear(input_size, size), ACTIVATIONS[activation]()]
        input_size = size
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(self, observation_space, action_space, hidden_layers: tuple[int, ...], activation: str = "tanh",
                 shared: bool = False, value_heads: int = 1, orthogonal_init: bool = True, log_std_init: float = 0.0):
        super().__init__()
        self.encoder = ObservationEncoder(observation_space)
        self.bfloat16_encoder = False  # set by an algorithm with precision=bfloat16
        features = hidden_layers[-1] if hidden_layers else self.encoder.output_size
        self.actor_body = body(self.encoder.output_size, hidden_layers, activation)  # the trunk, when shared
        self.shared = shared
        self.critic_body = None if shared else body(self.encoder.output_size, hidden_layers, activation)
        self.policy = policy_head(action_space, features, log_std_init)
        self.value = nn.Linear(features, value_heads) if value_heads else None
        # the layers as lists for run_layers (cheaper than calling the nn.Sequential modules)
        self._actor_layers = list(self.actor_body)
        self._critic_layers = list(self.actor_body if self.critic_body is None else self.critic_body)
        if orthogonal_init:
            # CleanRL / SB3: sqrt(2) for hidden layers, 0.01 for the policy output, 1 for the value output
            for layer in [*self.actor_body, *(self.critic_body if self.critic_body is not None else [])]:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, np.sqrt(2))
                    nn.init.zeros_(layer.bias)
            nn.init.orthogonal_(self.policy.linear.weight, 0.01)
            nn.init.zeros_(self.policy.linear.bias)
            if self.value is not None:
                nn.init.orthogonal_(self.value.weight, 1.0)
                nn.init.zeros_(self.value.bias)

    def forward(self, observations: torch.Tensor):
        """(action distribution, values of shape (batch, value_heads))."""
        features = self.encode(observations)
        actor_features = run_layers(self._actor_layers, features)
        critic_features = actor_features if self.shared else run_layers(self._critic_layers, features)
        return self.policy.forward(actor_features), self._values(critic_features)

    def _values(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.value.weight, self.value.bias)

    def distribution(self, observations: torch.Tensor):
        return self.policy.forward(run_layers(self._actor_layers, self.encode(observations)))

    def values(self, observations: torch.Tensor) -> torch.Tensor:
        return self._values(run_layers(self._critic_layers, self.encode(observations)))

    def encode(self, observations: torch.Tensor) -> torch.Tensor:
        """The encoder's features, in float32; with `bfloat16_encoder` its passes run in bfloat16 (mixed precision)
        and only its output comes back to float32, so the heads, log-probabilities and values stay float32."""
        if not self.bfloat16_encoder:
            return self.encoder(observations)
        with torch.autocast(observations.device.type, dtype=torch.bfloat16):
            return self.encoder(observations).float()

    def actor_parameters(self) -> list[nn.Parameter]:
        """The encoder, the actor body (the trunk, when shared) and the policy head."""
        return [*self.encoder.parameters(), *self.actor_body.parameters(), *self.policy.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        own_body = list(self.critic_body.parameters()) if self.critic_body is not None else []
        return [*own_body, *(self.value.parameters() if self.value is not None else [])]


def normalizable(space) -> bool:
    """Running normalisation applies to float Box observations (not one-hots, bits or uint8 images)."""
    return isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating)


def reported(value: torch.Tensor):
    """A metric for `runner.record`: a float, or on a GPU the tensor itself, which the runner sums there and reads
    at its next report (reading it now would make the CPU wait for the update at every update)."""
    value = value.detach()
    return value if value.device.type == "cuda" else float(value)


class ObservationUploader:
    """Observations to the device as they are, through one pinned host buffer reused every step, in a copy the
    CPU does not wait for. Reusing it is safe because each step then waits for its actions, computed from the
    copy, before the next one is written."""

    def __init__(self, device: torch.device):
        self.device = device
        self.staging: torch.Tensor | None = None

    def __call__(self, observations: np.ndarray) -> torch.Tensor:
        if self.device.type != "cuda":
            return torch.as_tensor(observations)
        source = torch.from_numpy(np.ascontiguousarray(observations))
        if self.staging is None or self.staging.shape != source.shape or self.staging.dtype != source.dtype:
            self.staging = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
        self.staging.copy_(source)
        return self.staging.to(self.device, non_blocking=True)


class PolicyGradientAgent(Agent):
    """Acting, normalisation state and the rollout loop; each algorithm adds its config, build and update.

    Configs that use this base have `normalize_observations`, `normalize_rewards` and `gamma` fields
    (REINFORCE and VPG fix the first two to False).
    """

    network: ActorCritic
    # rollout steps of a categorical policy act through numpy (`numpy_policy`) only where that was measured
    # to gain at least 10% in whole runs: A2C 1.17x (CPU time); PPO 1.07x to 1.12x in CPU time, but 1.15x in
    # wall time against the code before (b3c25c5, CartPole 50k steps, 3 interleaved rounds) (docs/benchmarks.md)
    numpy_acting = False
    # rollouts kept on the device as they are collected (None: on a GPU, where observations are not normalised)
    device_rollouts: bool | None = None

    def build_normalizers(self, num_envs: int) -> None:
        c = self.config
        self.obs_normalizer = None
        self.reward_normalizer = None
        if getattr(c, "normalize_observations", False) and normalizable(self.observation_space):
            self.obs_normalizer = ObservationNormalizer(self.observation_space.shape)
        if getattr(c, "normalize_rewards", False):
            self.reward_normalizer = RewardNormalizer(num_envs, c.gamma)

    def normalize_obs(self, observations: np.ndarray, update: bool = False) -> np.ndarray:
        if self.obs_normalizer is None:
            return observations
        return self.obs_normalizer.normalize(observations, update=update)

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        observations = torch.as_tensor(self.normalize_obs(np.asarray(observations)), device=self.device)
        with torch.no_grad():
            distribution = self.network.distribution(observations)
            actions = distribution.mode() if deterministic else distribution.sample()
        return self.network.policy.to_env(actions.cpu().numpy())

    @cached_property
    def numpy_policy(self) -> NumpyMLP | None:
        """The actor of a categorical policy on vector observations as a NumpyMLP (logits), or None.

        Read on the first rollout, after the algorithm made its parameters flat (NumpyMLP views them)."""
        if not self.numpy_acting:
            return None
        network = self.network
        layers = [*network.actor_body, network.policy.linear] if isinstance(network.policy, CategoricalHead) else []
        return numpy_network(self.device, network.encoder, layers)

    def rollout_actions(self, observations: np.ndarray, on_device: torch.Tensor | None = None) -> np.ndarray:
        """Sampled actions for a rollout step, in the distribution's coordinates (`on_device`: the observations
        already on the device)."""
        if on_device is not None:
            with torch.no_grad():
                return self.network.distribution(on_device).sample().cpu().numpy()
        if self.numpy_policy is not None:
            # a step at a time, numpy runs a small actor several times faster than torch; the sample is
            # Categorical.sample's Gumbel-max with the same draws of torch's generator
            logits = self.numpy_policy(observations)
            return (logits - np.log(torch.empty(logits.shape).exponential_().numpy())).argmax(axis=-1)
        with torch.no_grad():
            actions = self.network.distribution(torch.as_tensor(observations, device=self.device)).sample()
        return actions.cpu().numpy()

    def running_statistics(self) -> list:
        return [normalizer.stats for normalizer in (self.obs_normalizer, self.reward_normalizer) if normalizer]

    def extra_state(self) -> dict:
        state = {}
        if self.obs_normalizer is not None:
            state["obs_normalizer"] = self.obs_normalizer.state_dict()
        if self.reward_normalizer is not None:
            state["reward_normalizer"] = self.reward_normalizer.state_dict()
        return state

    def load_extra_state(self, state: dict) -> None:
        if self.obs_normalizer is not None and "obs_normalizer" in state:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        if self.reward_normalizer is not None and "reward_normalizer" in state:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])

    def new_buffer(self, num_steps: int, num_envs: int, intrinsic: bool = False) -> RolloutBuffer:
        obs_shape, obs_dtype = self.observation_space.shape, self.observation_space.dtype
        if self.obs_normalizer is not None:
            obs_dtype = np.float32
        head = self.network.policy
        on_device = self.device_rollouts
        if on_device is None:
            on_device = self.device.type == "cuda" and self.obs_normalizer is None
        return RolloutBuffer(num_steps, num_envs, obs_shape, obs_dtype, head.action_shape, head.action_dtype,
                             intrinsic=intrinsic, device=self.device, obs_on_device=on_device)

    def collect(self, runner, envs, buffer: RolloutBuffer, observations: np.ndarray):
        """Fill `buffer` with one rollout from `observations` (already normalised).

        Returns (observations to continue from, V of them (batch, heads), whether to keep training).
        A rollout cut short by the runner is left unfinished; the caller stops without updating.
        """
        buffer.reset()
        network, head, num_envs = self.network, self.network.policy, envs.num_envs
        if buffer.obs_on_device and getattr(self, "upload", None) is None:
            self.upload = ObservationUploader(self.device)
        upload = self.upload if buffer.obs_on_device else None
        # a CNN on a CPU costs as much per image in a batch of 8 as in one of thousands: there the acting pass gives
        # the values and log-probs too, instead of a second pass over the rollout (8% of PPO's time on Pong)
        while_acting = self.device.type == "cpu" and network.encoder.kind == "Image" and not buffer.obs_on_device
        acted: list[tuple[np.ndarray, np.ndarray]] = []  # (log-probs, values) of each step, while acting
        keep_going = True
        while keep_going and not buffer.full:
            # on a GPU each observation crosses once, as it is (uint8 for images): the policy acts on it and the
            # buffer keeps it there; the only wait of a step is for its actions, which the envs need
            on_device = upload(observations) if upload is not None else None
            if while_acting:
                with torch.no_grad():
                    distribution, values = network(torch.as_tensor(observations))
                    sampled = distribution.sample()
                    acted.append((distribution.log_prob(sampled).numpy(), values.numpy()))
                actions = sampled.numpy()
            else:  # values and log-probs come after the rollout
                actions = self.rollout_actions(observations, on_device)
            raw_next, rewards, terminated, truncated, infos = envs.step(head.to_env(actions))
            ended = terminated | truncated
            for episode_return, length in finished_episodes(infos):
                runner.episode(episode_return, length)
            real_next = real_next_observations(raw_next, ended, infos)
            next_observations = self.normalize_obs(raw_next, update=True)
            if self.reward_normalizer is not None:
                rewards = self.reward_normalizer.normalize(rewards, ended)
            buffer.add(observations if on_device is None else on_device, actions, rewards, terminated, truncated,
                       next_obs=real_next if buffer.intrinsic else None)
            # a time limit cut the episode short: bootstrap from V(last observation); a terminal state is
            # not bootstrapped, so its final value stays 0 (docs/algorithms.md, P1)
            cut = np.flatnonzero(truncated & ~terminated)
            if len(cut):
                final = torch.as_tensor(self.normalize_obs(real_next[cut]), device=self.device)
                with torch.no_grad():
                    buffer.set_final_values(cut, network.values(final)[:, 0].cpu().numpy())
            observations = next_observations
            keep_going = runner.advance(num_envs * self.group.size)  # every process steps as many
        if not buffer.full:
            return observations, None, keep_going
        if while_acting:
            with torch.no_grad():
                last_values = network.values(torch.as_tensor(observations))
            buffer.set_values(np.concatenate([log_probs for log_probs, _ in acted]),
                              np.concatenate([values for _, values in acted]))
            return observations, last_values.numpy(), keep_going
        # the policy did not change during the rollout: one batched pass gives every step's V(s_t) and
        # log pi(a_t | s_t), and V of the observations after the last step (much cheaper than 2 x n_steps
        # small passes)
        with torch.no_grad():
            everything = buffer.everything()
            distribution, values = network(everything.obs)
            log_probs = distribution.log_prob(everything.actions)
            last_values = network.values(torch.as_tensor(observations, device=self.device))
        buffer.set_values(log_probs.cpu().numpy(), values.cpu().numpy())
        return observations, last_values.cpu().numpy(), keep_going
