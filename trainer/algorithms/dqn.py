"""Deep Q-Network and its extensions, freely combinable up to Rainbow.

- DQN: Mnih et al. 2015, https://www.nature.com/articles/nature14236 (replay, target network,
  epsilon-greedy with a linear decay, Huber loss, gradient-norm clipping).
- Double Q-learning: van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461
- Dueling heads: Wang et al. 2016, https://arxiv.org/abs/1511.06581
- Noisy nets: Fortunato et al. 2018, https://arxiv.org/abs/1706.10295
- n-step returns and prioritized replay: Schaul et al. 2016, https://arxiv.org/abs/1511.05952
- Categorical (C51): Bellemare et al. 2017, https://arxiv.org/abs/1707.06887
- Rainbow: Hessel et al. 2018, https://arxiv.org/abs/1710.02298
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainer.agent import Agent
from trainer.buffers import (FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer, PrioritizedReplayBuffer,
                             ReplayBatch, ReplayBuffer)
from trainer.envs import finished_episodes, is_atari, real_next_observations
from trainer import update_strategies
from trainer.cpu_speed import FlatAdam, FlatParameters, clip_grad_norm
from trainer.networks import NoisyLinear, ObservationEncoder, mlp, parse_hidden_layers, reset_noise, run_layers
from trainer.params import MAX_UPDATES_PER_STEP, param, vectorization_param
from trainer.registry import AlgorithmSpec, DQN_FAMILY
from trainer.schedules import crossed, linear


@dataclass
class DQNConfig:
    """Defaults are rl-baselines3-zoo's tuned CartPole-v1 settings (500 +- 0 at 50k env steps)."""

    # Adam step size
    learning_rate: float = param(2.3e-3, "Adam learning rate.", low=0, low_inclusive=False, high=1, live=True)
    optimizer_epsilon: float = param(1e-8, "Adam epsilon (Rainbow uses 1.5e-4).", low=0, low_inclusive=False, high=1)
    # transitions kept for replay
    buffer_size: int = param(100_000, "Replay buffer capacity, in transitions.", low=1, high=50_000_000)
    # env steps collected before the first gradient update
    learning_starts: int = param(1_000, "Env steps collected before learning starts.", low=0)
    batch_size: int = param(64, "Transitions per gradient update.", low=1, high=65_536)
    gamma: float = param(0.99, "Discount factor.", low=0, high=1)
    # a training phase every `train_frequency` env steps, of `gradient_steps` updates
    train_frequency: int = param(256, "Env steps between training phases.", low=1, live=True)
    gradient_steps: int = param(128, "Gradient updates per training phase (at most 100 per env step: "
                                     "100 x train_frequency).", low=1, high=100_000, live=True)
    # rlpyt's replay ratio: when set, it replaces train_frequency and gradient_steps
    replay_ratio: float = param(0.0, "Gradient updates per env step (0: use train_frequency and gradient_steps).",
                                low=0, high=MAX_UPDATES_PER_STEP)
    # counted in env steps, independently of the training phases (cleanrl#322)
    target_update_interval: int = param(10, "Env steps between target network updates.", low=1, live=True)
    tau: float = param(1.0, "Polyak weight of each target update (1: hard copy).", low=0,
                                     low_inclusive=False, high=1, live=True)
    exploration_fraction: float = param(0.16, "Fraction of the run over which epsilon decays linearly.",
                                        low=0, high=1)
    exploration_initial_eps: float = param(1.0, "Epsilon at the start.", low=0, high=1)
    exploration_final_eps: float = param(0.04, "Epsilon after the decay.", low=0, high=1, live=True)
    # rlpyt's vector epsilon: final epsilons log-spaced over the envs, from this minimum up to the final
    exploration_final_eps_min: float = param(0.0, "With several envs, the smallest final epsilon; the envs' "
                                                  "final epsilons are log-spaced up to exploration_final_eps "
                                                  "(0: all equal).", low=0, high=1)
    # Huber loss threshold on the TD error; 0 means plain squared error
    delta_clip: float = param(1.0, "Huber loss threshold on the TD error (0 for squared error).", low=0)
    max_grad_norm: float = param(10.0, "Clip the gradient norm to this (0 turns clipping off).", low=0, live=True)
    hidden_layers: str = param("256,256", "Hidden layer sizes after the observation encoder, comma-separated.")
    num_envs: int = param(1, "Environments stepped side by side.", low=1, high=256)
    vectorization: str = vectorization_param()
    double_q: bool = param(False, "Double Q-learning: the online network picks the next action, the target "
                                  "network values it.")
    dueling: bool = param(False, "Dueling heads: Q = V + A - mean(A).")
    noisy: bool = param(False, "Noisy linear layers explore instead of epsilon (epsilon is then 0).")
    noisy_std: float = param(0.5, "Initial noise scale sigma_0 of the noisy layers.", low=0, high=10)
    noisy_factorised: bool = param(True, "Factorised Gaussian noise (else independent per weight).")
    n_step_return: int = param(1, "Steps of real rewards before bootstrapping.", low=1, high=100)
    prioritized_replay: bool = param(False, "Sample transitions in proportion to their TD error.")
    priority_alpha: float = param(0.6, "How strongly priorities shape sampling (0: uniform).", low=0, high=1)
    priority_beta: float = param(0.4, "Initial importance-sampling exponent, annealed to 1 by the end.",
                                 low=0, high=1)
    priority_epsilon: float = param(1e-6, "Added to |TD error| so no transition has zero priority.", low=0,
                                    low_inclusive=False)
    categorical: bool = param(False, "Distributional C51 head: a categorical distribution over returns.")
    num_atoms: int = param(51, "Atoms of the return distribution (C51).", low=2, high=1001)
    v_min: float = param(-10.0, "Smallest return the distribution covers (C51).")
    v_max: float = param(10.0, "Largest return the distribution covers (C51).")

    def check(self) -> dict[str, str]:
        errors = {}
        if self.categorical and self.v_min >= self.v_max:
            errors["v_max"] = f"must be greater than v_min ({self.v_min})"
        if self.exploration_final_eps_min > self.exploration_final_eps:
            errors["exploration_final_eps_min"] = "must not exceed exploration_final_eps"
        if self.dueling and self.hidden_layers.strip(", ") == "":  # other bad layer sizes: the shared checks
            errors["hidden_layers"] = "dueling heads need at least one hidden layer"
        return errors

    def unused(self) -> dict[str, str]:
        """The settings this configuration ignores, with why (not offered as live changes of its runs)."""
        if not self.noisy:
            return {}
        return {name: "noisy layers explore instead of epsilon" for name in (
            "exploration_fraction", "exploration_initial_eps", "exploration_final_eps", "exploration_final_eps_min")}


class QNetwork(nn.Module):
    """Encoder, hidden layers, then Q-values [B, A], or per-atom logits [B, A, atoms] for C51.

    With dueling heads the last hidden layer splits into a value stream and an advantage stream.
    """

    def __init__(self, observation_space, num_actions: int, config: DQNConfig):
        super().__init__()
        c = config
        self.num_actions, self.num_atoms = num_actions, (c.num_atoms if c.categorical else 1)
        linear = nn.Linear
        if c.noisy:
            def linear(n_in, n_out):
                return NoisyLinear(n_in, n_out, c.noisy_std, c.noisy_factorised)
        self.encoder = ObservationEncoder(observation_space)
        layers = parse_hidden_layers(c.hidden_layers)
        outputs = num_actions * self.num_atoms
        self.dueling = c.dueling
        if c.dueling:
            self.body = mlp(self.encoder.output_size, layers[:-1], None, linear=linear)
            width = layers[-2] if len(layers) > 1 else self.encoder.output_size
            self.value = mlp(width, layers[-1:], self.num_atoms, linear=linear)
            self.advantage = mlp(width, layers[-1:], outputs, linear=linear)
        else:
            self.body = mlp(self.encoder.output_size, layers, outputs, linear=linear)
        # the layers as lists for run_layers (cheaper than calling the nn.Sequential modules)
        self._body = list(self.body)
        self._value, self._advantage = (list(self.value), list(self.advantage)) if c.dueling else ([], [])

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        features = run_layers(self._body, self.encoder(observations))
        if self.dueling:
            value = run_layers(self._value, features).view(-1, 1, self.num_atoms)
            advantage = run_layers(self._advantage, features).view(-1, self.num_actions, self.num_atoms)
            # the mean over actions, per sample (and per atom for C51), not over the batch
            outputs = value + advantage - advantage.mean(dim=1, keepdim=True)
        else:
            outputs = features.view(-1, self.num_actions, self.num_atoms)
        return outputs.squeeze(-1) if self.num_atoms == 1 else outputs


def categorical_projection(next_probabilities: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                           support: torch.Tensor) -> torch.Tensor:
    """Project the distribution of r + discount * Z onto the fixed support (C51's target).

    `discounts` already hold gamma^m * (1 - terminated). Each shifted atom Tz is clamped into
    [v_min, v_max] and its probability split between its two neighbouring atoms in proportion to
    closeness: the triangular kernel max(0, 1 - |Tz - z_j| / dz) (as rlpyt), which needs no special
    case for atoms that land exactly on a bin.
    """
    delta = support[1] - support[0]
    shifted = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support.unsqueeze(0)).clamp(support[0], support[-1])
    kernel = (1 - (shifted.unsqueeze(2) - support.view(1, 1, -1)).abs() / delta).clamp(min=0)  # [B, i, j]
    return (next_probabilities.unsqueeze(2) * kernel).sum(dim=1)


@contextlib.contextmanager
def mean_weights(network: nn.Module):
    """Noisy layers act with their mean weights inside this block (greedy evaluation)."""
    was_training = network.training
    network.eval()
    try:
        yield
    finally:
        network.train(was_training)


class DQN(Agent):
    name = "dqn"

    def build(self) -> None:
        c = self.config
        num_actions = int(self.action_space.n)
        self.q_network = QNetwork(self.observation_space, num_actions, c).to(self.device)
        self.target_network = QNetwork(self.observation_space, num_actions, c).to(self.device)
        self.target_network.load_state_dict(self.q_network.state_dict())
        self.target_network.requires_grad_(False)
        # each network's parameters are views into one tensor: one Adam and clipping call per update
        self.q_flat = FlatParameters(self.q_network.parameters())
        self.target_flat = FlatParameters(self.target_network.parameters(), gradients=False)
        self.optimizer = FlatAdam([self.q_flat.param], lr=c.learning_rate, eps=c.optimizer_epsilon)
        self.modules = {"q_network": self.q_network, "target_network": self.target_network}
        self.optimizers = {"optimizer": self.optimizer}
        self.support = torch.linspace(c.v_min, c.v_max, c.num_atoms, device=self.device)
        self.epsilons = self.epsilon_schedules()
        self.beta = linear(c.priority_beta, 1.0, 1.0)
        # how a training phase's updates and the act steps run: as written below, or a faster strategy with
        # the same numbers on this machine (CUDA graphs on a GPU; hand-written gradients, shared targets and
        # numpy acting on a CPU): trainer.update_strategies, chosen there and only there
        self.strategy = update_strategies.for_dqn(self)

    def epsilon_schedules(self) -> list:
        """Each sub-env's epsilon as a function of progress."""
        c = self.config
        initial = 0.0 if c.noisy else c.exploration_initial_eps
        finals = np.full(c.num_envs, 0.0 if c.noisy else c.exploration_final_eps)
        if c.exploration_final_eps_min > 0 and c.num_envs > 1 and not c.noisy:
            finals = np.logspace(np.log10(c.exploration_final_eps_min), np.log10(c.exploration_final_eps),
                                 c.num_envs)
        return [linear(initial, final, c.exploration_fraction) for final in finals]

    def live_changed(self, names: set[str]) -> None:
        """A new exploration_final_eps is the new end of the epsilon schedule, from the next env step."""
        if "exploration_final_eps" in names:
            self.epsilons = self.epsilon_schedules()
        self.strategy.forget()  # a CUDA graph holds the old learning rate, clipping norm, ...

    def q_values(self, network: nn.Module, observations: torch.Tensor) -> torch.Tensor:
        outputs = network(observations)
        if self.config.categorical:
            return (outputs.softmax(dim=2) * self.support).sum(dim=2)
        return outputs

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """argmax_a Q(s, a) (the strategy may act faster: `self.strategy.greedy`)."""
        observations = torch.as_tensor(observations, device=self.device)
        with torch.inference_mode():  # no autograd bookkeeping at all while acting
            return self.q_values(self.q_network, observations).argmax(dim=1).cpu().numpy()

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        with mean_weights(self.q_network) if deterministic else contextlib.nullcontext():
            actions = self.strategy.greedy(observations)
        if not deterministic and not self.config.noisy:
            explore = self.rng.random(len(actions)) < self.config.exploration_final_eps
            actions[explore] = self.rng.integers(0, self.action_space.n, size=int(explore.sum()))
        return actions + int(self.action_space.start)

    def explore(self, observations: np.ndarray, epsilons: np.ndarray) -> np.ndarray:
        """Epsilon-greedy per sub-env (noisy nets act greedily on their noisy weights)."""
        explore = self.rng.random(len(observations)) < epsilons
        actions = self.rng.integers(0, self.action_space.n, size=len(observations))
        if not explore.all():
            actions = np.where(explore, actions, self.strategy.greedy(observations))
        return actions

    def update(self, buffer: ReplayBuffer, beta: float = 1.0) -> dict[str, torch.Tensor]:
        """One gradient step on a fresh batch: its TD targets, then the loss's step (`learn_from`)."""
        batch = self.sample(buffer, beta)
        metrics = self.learn_from(batch, self.targets(batch))
        if self.config.prioritized_replay:
            buffer.update_priorities(batch.indices, metrics.pop("priorities"))
        return metrics

    def sample(self, buffer: ReplayBuffer, beta: float) -> ReplayBatch:
        """A batch for the next update, prioritized with importance weights to the power `beta` if asked;
        noisy nets draw fresh noise for both networks before every optimisation step (in place)."""
        c = self.config
        if c.prioritized_replay:
            batch = buffer.sample(c.batch_size, self.rng, c.n_step_return, c.gamma, beta=beta)
        else:
            batch = buffer.sample(c.batch_size, self.rng, c.n_step_return, c.gamma)
        if c.noisy:
            reset_noise(self.q_network)
            reset_noise(self.target_network)
        return batch

    def targets(self, batch) -> torch.Tensor:
        """TD targets r + gamma^m * Q_target(s', a*), or their projected distribution for C51."""
        c = self.config
        # gamma^m, and no bootstrap past a true terminal state; truncations are bootstrapped (P1)
        bootstrap = batch.discounts * (1.0 - batch.terminated)
        with torch.no_grad():
            target_outputs = self.target_network(batch.next_obs)
            if c.double_q:  # the online network picks, the target network values
                next_actions = self.q_values(self.q_network, batch.next_obs).argmax(dim=1)
            elif c.categorical:
                next_actions = (target_outputs.softmax(dim=2) * self.support).sum(dim=2).argmax(dim=1)
            else:
                next_actions = target_outputs.argmax(dim=1)
            next_outputs = target_outputs[torch.arange(len(next_actions), device=self.device), next_actions]
            if c.categorical:
                return categorical_projection(next_outputs.softmax(dim=1), batch.rewards, bootstrap, self.support)
            return batch.rewards + bootstrap * next_outputs

    def learn_from(self, batch, target: torch.Tensor) -> dict:
        """One gradient step on the TD loss mean_i w_i L(Q(s_i, a_i), target_i): L the Huber loss (squared
        error with delta_clip 0), or for C51 the cross-entropy against the projected target distribution;
        w_i the importance weights of prioritized replay (else 1)."""
        c = self.config
        actions = batch.actions.long()
        outputs = self.q_network(batch.obs)[torch.arange(len(actions), device=self.device), actions]
        if c.categorical:
            per_sample = -(target * outputs.log_softmax(dim=1)).sum(dim=1)  # cross-entropy
            q = (outputs.softmax(dim=1) * self.support).sum(dim=1).detach()
        else:
            if c.delta_clip > 0:
                per_sample = F.huber_loss(outputs, target, delta=c.delta_clip, reduction="none")
            else:
                per_sample = F.mse_loss(outputs, target, reduction="none")
            q = outputs.detach()
        loss = (per_sample * batch.weights).mean() if batch.weights is not None else per_sample.mean()
        self.q_flat.zero_grad()
        loss.backward()
        if c.max_grad_norm > 0:
            clip_grad_norm([self.q_flat], c.max_grad_norm)
        self.optimizer.step()
        metrics = {"train/loss": loss.detach(), "train/q_mean": q.mean()}
        if c.prioritized_replay:  # C51 uses each sample's cross-entropy as its priority
            metrics["priorities"] = (per_sample.detach() if c.categorical else (target - q).abs()).cpu().numpy()
        return metrics

    def update_target(self) -> None:
        tau = self.config.tau
        with torch.no_grad():
            if tau >= 1.0:
                self.target_flat.param.copy_(self.q_flat.param)
            else:
                self.target_flat.param.lerp_(self.q_flat.param, tau)
            for target, online in zip(self.target_network.buffers(), self.q_network.buffers()):
                target.copy_(online)

    def make_buffer(self) -> ReplayBuffer:
        c = self.config
        arguments = (c.buffer_size, self.observation_space.shape, self.observation_space.dtype)
        options = dict(device=self.device, num_envs=c.num_envs)
        frame_stacks = is_atari(self.env_id)  # Atari observations are stacks of frames: store each frame once
        if c.prioritized_replay:
            buffer_class = PrioritizedFrameStackReplayBuffer if frame_stacks else PrioritizedReplayBuffer
            return buffer_class(*arguments, alpha=c.priority_alpha, epsilon=c.priority_epsilon, **options)
        return (FrameStackReplayBuffer if frame_stacks else ReplayBuffer)(*arguments, **options)

    def train(self, runner) -> None:
        c = self.config
        self.buffer = buffer = self.make_buffer()
        with self.training_envs(c.num_envs) as (envs, observations):
            learning_starts = min(max(c.learning_starts, c.batch_size), buffer.capacity)
            update_credit = 0.0  # replay_ratio: updates owed so far
            while True:
                epsilons = np.array([epsilon(runner.progress) for epsilon in self.epsilons])
                if len(buffer) < learning_starts:
                    # the warm-up fills replay with uniformly random actions (Mnih et al. 2015, SB3), also when
                    # the epsilon schedule ends before learning starts: not with the untrained network's choice
                    epsilons[:] = 1.0
                if c.noisy:
                    # fresh acting noise every step (as Dopamine's Rainbow); a network whose noise changed
                    # only with the updates repeats one action when a seed starts with one dominant
                    reset_noise(self.q_network)
                actions = self.explore(observations, epsilons)
                next_observations, rewards, terminated, truncated, infos = envs.step(
                    actions + int(self.action_space.start))
                buffer.add(observations, actions, rewards,
                           real_next_observations(next_observations, terminated | truncated, infos), terminated,
                           truncated)
                observations = next_observations
                for episode_return, length in finished_episodes(infos):
                    runner.episode(episode_return, length)

                before = self.steps_done
                keep_going = runner.advance(c.num_envs)
                if len(buffer) >= learning_starts:
                    if c.replay_ratio > 0:
                        update_credit += c.replay_ratio * c.num_envs
                        updates, update_credit = int(update_credit), update_credit - int(update_credit)
                    else:
                        updates = c.gradient_steps if crossed(before, self.steps_done, c.train_frequency) else 0
                    for metrics in self.strategy.updates(buffer, updates, beta=self.beta(runner.progress)):
                        runner.record(metrics)
                        if runner.should_stop():  # a cancel ends a long training phase within a second
                            break
                    if updates:
                        runner.record({"train/epsilon": float(epsilons.mean())})
                if crossed(before, self.steps_done, c.target_update_interval):
                    self.update_target()
                if not keep_going:
                    return


PRESETS = {
    "dqn": ("Deep Q-Network: replay buffer, target network, epsilon-greedy exploration (Mnih et al. 2015).", ()),
    "double-dqn": ("DQN with double Q-learning targets (van Hasselt et al. 2016).", (("double_q", True),)),
    "dueling-dqn": ("DQN with dueling value and advantage heads (Wang et al. 2016).", (("dueling", True),)),
    "noisy-dqn": ("DQN exploring with factorised noisy layers instead of epsilon (Fortunato et al. 2018).",
                  (("noisy", True),)),
    "nstep-dqn": ("DQN with 3-step returns (Sutton 1988; Hessel et al. 2018).", (("n_step_return", 3),)),
    "per-dqn": ("DQN with proportional prioritized replay, alpha 0.6, beta 0.4 to 1 (Schaul et al. 2016).",
                (("prioritized_replay", True),)),
    "c51": ("Categorical DQN: 51 atoms over [-10, 10] (Bellemare et al. 2017).", (("categorical", True),)),
    "rainbow": ("Rainbow: double, dueling, noisy, 3-step, prioritized (alpha 0.5) and C51 combined "
                "(Hessel et al. 2018).",
                (("double_q", True), ("dueling", True), ("noisy", True), ("n_step_return", 3), ("prioritized_replay", True),
                 ("priority_alpha", 0.5), ("categorical", True))),
}
# the entry points in pyproject.toml name these: trainer.algorithms.dqn:SPECS.double_dqn
SPECS = SimpleNamespace(**{name.replace("-", "_"): AlgorithmSpec(
    name=name, family=DQN_FAMILY, description=description, config_class=DQNConfig, agent_class=DQN,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"), action_spaces=("Discrete",),
    presets=presets) for name, (description, presets) in PRESETS.items()})
