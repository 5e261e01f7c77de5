"""Deep Q-Network.

Mnih et al. 2015, "Human-level control through deep reinforcement learning",
https://www.nature.com/articles/nature14236. Replay buffer, target network, epsilon-greedy with a
linear decay, Huber loss and gradient-norm clipping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainer.agent import Agent
from trainer.buffers import ReplayBuffer
from trainer.envs import finished_episodes, make_vector_env
from trainer.networks import ObservationEncoder, mlp, parse_hidden_layers
from trainer.params import param
from trainer.registry import AlgorithmSpec, register
from trainer.schedules import crossed, linear


@dataclass
class DQNConfig:
    """Defaults are rl-baselines3-zoo's tuned CartPole-v1 settings (500 +- 0 at 50k env steps)."""

    # Adam step size
    learning_rate: float = param(2.3e-3, "Adam learning rate.", low=0, low_inclusive=False, high=1)
    # transitions kept for replay
    buffer_size: int = param(100_000, "Replay buffer capacity, in transitions.", low=1, high=50_000_000)
    # env steps collected before the first gradient update
    learning_starts: int = param(1_000, "Env steps collected before learning starts.", low=0)
    batch_size: int = param(64, "Transitions per gradient update.", low=1, high=65_536)
    gamma: float = param(0.99, "Discount factor.", low=0, high=1)
    # a training phase every `train_frequency` env steps, of `gradient_steps` updates
    train_frequency: int = param(256, "Env steps between training phases.", low=1)
    gradient_steps: int = param(128, "Gradient updates per training phase.", low=1, high=100_000)
    # counted in env steps, independently of the training phases (cleanrl#322)
    target_update_interval: int = param(10, "Env steps between copies of the online network into the target "
                                            "network.", low=1)
    exploration_fraction: float = param(0.16, "Fraction of the run over which epsilon decays linearly.",
                                        low=0, high=1)
    exploration_initial_eps: float = param(1.0, "Epsilon at the start.", low=0, high=1)
    exploration_final_eps: float = param(0.04, "Epsilon after the decay.", low=0, high=1)
    # Huber loss threshold on the TD error; 0 means plain squared error
    delta_clip: float = param(1.0, "Huber loss threshold on the TD error (0 for squared error).", low=0)
    max_grad_norm: float = param(10.0, "Clip the gradient norm to this (0 turns clipping off).", low=0)
    hidden_layers: str = param("256,256", "Hidden layer sizes of the Q-network, comma-separated.")
    num_envs: int = param(1, "Environments stepped side by side.", low=1, high=256)

    def check(self) -> dict[str, str]:
        errors = {}
        if self.batch_size > self.buffer_size:
            errors["batch_size"] = f"must not exceed the buffer size ({self.buffer_size})"
        try:
            parse_hidden_layers(self.hidden_layers)
        except ValueError as error:
            errors["hidden_layers"] = str(error)
        return errors


class QNetwork(nn.Module):
    def __init__(self, observation_space, num_actions: int, hidden_layers: tuple[int, ...]):
        super().__init__()
        self.encoder = ObservationEncoder(observation_space)
        self.body = mlp(self.encoder.output_size, hidden_layers, num_actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.body(self.encoder(observations))


class DQN(Agent):
    name = "dqn"

    def build(self) -> None:
        c = self.config
        num_actions = int(self.action_space.n)
        layers = parse_hidden_layers(c.hidden_layers)
        self.q_network = QNetwork(self.observation_space, num_actions, layers).to(self.device)
        self.target_network = QNetwork(self.observation_space, num_actions, layers).to(self.device)
        self.target_network.load_state_dict(self.q_network.state_dict())
        self.target_network.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_network.parameters(), lr=c.learning_rate, fused=True)
        self.modules = {"q_network": self.q_network, "target_network": self.target_network}
        self.optimizers = {"optimizer": self.optimizer}
        self.epsilon = linear(c.exploration_initial_eps, c.exploration_final_eps, c.exploration_fraction)

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        with torch.no_grad():
            q_values = self.q_network(torch.as_tensor(observations, device=self.device))
        actions = q_values.argmax(dim=1).cpu().numpy()
        if not deterministic:
            explore = self.rng.random(len(actions)) < self.config.exploration_final_eps
            actions[explore] = self.rng.integers(0, self.action_space.n, size=int(explore.sum()))
        return actions + int(self.action_space.start)

    def explore(self, observations: np.ndarray, epsilon: float) -> np.ndarray:
        """Epsilon-greedy over a batch; the network is skipped when every action is random."""
        explore = self.rng.random(len(observations)) < epsilon
        actions = self.rng.integers(0, self.action_space.n, size=len(observations))
        if not explore.all():
            greedy = self.act(observations, deterministic=True) - int(self.action_space.start)
            actions = np.where(explore, actions, greedy)
        return actions

    def update(self, buffer: ReplayBuffer) -> dict[str, torch.Tensor]:
        c = self.config
        batch = buffer.sample(c.batch_size, self.rng)
        with torch.no_grad():
            next_q = self.target_network(batch.next_obs).max(dim=1).values
            # no bootstrap past a true terminal state; a time-limit truncation is bootstrapped (P1)
            target = batch.rewards + c.gamma * (1.0 - batch.terminated) * next_q
        q = self.q_network(batch.obs).gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)
        if c.delta_clip > 0:
            loss = F.huber_loss(q, target, delta=c.delta_clip)
        else:
            loss = F.mse_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.q_network.parameters(), c.max_grad_norm)
        self.optimizer.step()
        return {"train/loss": loss.detach(), "train/q_mean": q.detach().mean()}

    def train(self, runner) -> None:
        c = self.config
        self.buffer = buffer = ReplayBuffer(c.buffer_size, self.observation_space.shape,
                                            self.observation_space.dtype, device=self.device)
        # a resumed run starts its envs from a fresh seed, not the episodes it has already played
        envs = make_vector_env(self.env_id, c.num_envs, seed=self.seed + self.steps_done)
        observations, _ = envs.reset(seed=self.seed + self.steps_done)
        learning_starts = min(max(c.learning_starts, c.batch_size), c.buffer_size)
        try:
            while True:
                epsilon = self.epsilon(runner.progress)
                actions = self.explore(observations, epsilon)
                next_observations, rewards, terminated, truncated, infos = envs.step(
                    actions + int(self.action_space.start))
                done = terminated | truncated
                real_next_observations = next_observations
                if done.any():  # SAME_STEP autoreset: the episode's real last observation is in infos
                    real_next_observations = next_observations.copy()
                    for i in np.flatnonzero(done):
                        real_next_observations[i] = infos["final_obs"][i]
                buffer.add(observations, actions, rewards, real_next_observations, terminated)
                observations = next_observations

                for episode_return, length in finished_episodes(infos):
                    runner.episode(episode_return, length)

                before = self.steps_done
                keep_going = runner.advance(c.num_envs)
                if len(buffer) >= learning_starts and crossed(before, self.steps_done, c.train_frequency):
                    for _ in range(c.gradient_steps):
                        runner.record(self.update(buffer))
                    runner.record({"train/epsilon": epsilon})
                if crossed(before, self.steps_done, c.target_update_interval):
                    self.target_network.load_state_dict(self.q_network.state_dict())
                if not keep_going:
                    return
        finally:
            envs.close()


register(AlgorithmSpec(
    name="dqn",
    family="Value-based",
    description="Deep Q-Network: replay buffer, target network, epsilon-greedy exploration (Mnih et al. 2015).",
    config_class=DQNConfig,
    agent_class=DQN,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"),
    action_spaces=("Discrete",),
))
