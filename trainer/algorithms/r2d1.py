"""R2D1: recurrent replay distributed DQN, on one machine.

Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement Learning",
https://openreview.net/forum?id=r1lyTjAqYX (as rlpyt's R2D1). An LSTM Q-network learns from sequences
of replay that start from the recurrent state stored when they were played; the first `burn_in` steps
of each sequence only warm that state up. Targets are n-step, double and dueling, in a rescaled value
space h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x; a sequence's priority mixes the max and mean of its
absolute TD errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainer.agent import Agent
from trainer.buffers import SumTree
from trainer.envs import finished_episodes
from trainer.networks import ObservationEncoder
from trainer.params import param, vectorization_param
from trainer.registry import AlgorithmSpec, DQN_FAMILY
from trainer.schedules import crossed, linear


@dataclass
class R2D1Config:
    """Small-env defaults (rlpyt's Atari ones: sequence 80, burn-in 40, n 5, gamma 0.997, lr 1e-4, LSTM 512)."""

    learning_rate: float = param(1e-3, "Adam learning rate.", low=0, low_inclusive=False, high=1, live=True)
    optimizer_epsilon: float = param(1e-3, "Adam epsilon (rlpyt uses 1e-3).", low=0, low_inclusive=False, high=1)
    buffer_size: int = param(100_000, "Replay capacity in env steps (all envs together).", low=100,
                             high=50_000_000)
    learning_starts: int = param(2_000, "Env steps collected before learning starts.", low=0)
    batch_size: int = param(32, "Sequences per gradient update.", low=1, high=4096)
    sequence_length: int = param(20, "Steps of each sequence that are trained on.", low=1, high=1000)
    burn_in: int = param(10, "Steps before them that only warm up the recurrent state.", low=0, high=1000)
    gamma: float = param(0.99, "Discount factor.", low=0, high=1)
    n_step_return: int = param(5, "Steps of real rewards before bootstrapping.", low=1, high=100)
    num_envs: int = param(4, "Environments stepped side by side.", low=1, high=256)
    vectorization: str = vectorization_param()
    replay_ratio: float = param(0.25, "Gradient updates per env step.", low=0, low_inclusive=False, high=100)
    target_update_interval: int = param(1_000, "Env steps between copies into the target network.", low=1, live=True)
    exploration_fraction: float = param(0.3, "Fraction of the run over which epsilon decays.", low=0, high=1)
    exploration_initial_eps: float = param(1.0, "Epsilon at the start.", low=0, high=1)
    exploration_final_eps: float = param(0.02, "Epsilon after the decay.", low=0, high=1, live=True)
    priority_alpha: float = param(0.6, "Priority exponent (0: uniform sampling).", low=0, high=1)
    priority_beta: float = param(0.4, "Initial importance-sampling exponent, annealed to 1.", low=0, high=1)
    priority_eta: float = param(0.9, "Sequence priority = eta * max |TD| + (1 - eta) * mean |TD|.", low=0, high=1)
    value_rescale_epsilon: float = param(1e-3, "Epsilon of the value rescaling h(x) (0 turns rescaling off).",
                                         low=0, high=1)
    delta_clip: float = param(1.0, "Huber loss threshold (0 for squared error).", low=0)
    max_grad_norm: float = param(80.0, "Clip the gradient norm to this (0 turns clipping off).", low=0, live=True)
    hidden_size: int = param(64, "Units of the layer before the LSTM.", low=1, high=65_536)
    lstm_size: int = param(64, "Units of the LSTM.", low=1, high=65_536)

    def check(self) -> dict[str, str]:
        window = self.burn_in + self.sequence_length + self.n_step_return
        if self.buffer_size < window * self.num_envs * 2:
            return {"buffer_size": f"must hold at least two sequences of {window} steps per env"}
        return {}


def value_rescale(x: torch.Tensor, epsilon: float) -> torch.Tensor:
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)."""
    if epsilon == 0:
        return x
    return x.sign() * ((x.abs() + 1).sqrt() - 1) + epsilon * x


def inverse_value_rescale(y: torch.Tensor, epsilon: float) -> torch.Tensor:
    """h^-1(y) = sign(y)(((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)."""
    if epsilon == 0:
        return y
    return y.sign() * ((((1 + 4 * epsilon * (y.abs() + 1 + epsilon)).sqrt() - 1) / (2 * epsilon)) ** 2 - 1)


def nstep_sequence_targets(rewards, terminated, ended, next_values, gamma: float, n_step: int, first: int,
                           steps: int) -> torch.Tensor:
    """n-step returns for steps first..first+steps-1 of time-major sequences [time, batch].

    `next_values[t - first]` is the value of the state after step t. A return sums up to `n_step`
    discounted rewards and stops after a step that ended its episode: it bootstraps from the state
    after its last step unless that step was a true termination (a truncated episode bootstraps from
    its final observation, which the caller put in `next_values`). Never across an episode's end.
    """
    window = slice(first, first + steps)
    alive = torch.ones_like(rewards[window])
    total, bootstrap, discount = torch.zeros_like(alive), torch.zeros_like(alive), 1.0
    for j in range(n_step):
        at = slice(first + j, first + j + steps)
        ended_here = ended[at].float()
        total = total + alive * discount * rewards[at]
        discount *= gamma
        stops = alive * (ended_here if j < n_step - 1 else 1.0)  # the return's last step
        bootstrap = bootstrap + stops * discount * (1 - terminated[at]) * next_values[j:j + steps]
        alive = alive * (1 - ended_here)
    return total + bootstrap


class RecurrentQNetwork(nn.Module):
    """Encoder, a ReLU layer, an LSTM, then dueling value and advantage heads."""

    def __init__(self, observation_space, num_actions: int, hidden_size: int, lstm_size: int):
        super().__init__()
        self.encoder = ObservationEncoder(observation_space)
        self.hidden = nn.Sequential(nn.Linear(self.encoder.output_size, hidden_size), nn.ReLU())
        self.lstm = nn.LSTMCell(hidden_size, lstm_size)
        self.value = nn.Linear(lstm_size, 1)
        self.advantage = nn.Linear(lstm_size, num_actions)
        self.lstm_size = lstm_size

    def initial_state(self, batch: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, self.lstm_size, device=device)
        return zeros, zeros.clone()

    def step(self, observations: torch.Tensor, state):
        """One time step for a batch: (Q-values [B, A], new state)."""
        h, c = self.lstm(self.hidden(self.encoder(observations)), state)
        advantage = self.advantage(h)
        return self.value(h) + advantage - advantage.mean(dim=1, keepdim=True), (h, c)

    def unroll(self, observations: torch.Tensor, starts: torch.Tensor, state):
        """Q-values [T, B, A] and the states after each step, over a time-major sequence; the state is
        zeroed before every step that begins an episode (`starts` [T, B])."""
        q_values, states = [], []
        for t in range(observations.shape[0]):
            keep = (~starts[t]).float().unsqueeze(1)
            q, state = self.step(observations[t], (state[0] * keep, state[1] * keep))
            q_values.append(q)
            states.append(state)
        return torch.stack(q_values), states


class SequenceReplay:
    """Time-major replay [time, env] with the recurrent state stored at every step, sampled as windows
    of `window` steps by priority. A window may start where its whole length is stored."""

    def __init__(self, capacity_steps: int, num_envs: int, window: int, observation_space, lstm_size: int,
                 alpha: float):
        self.length, self.num_envs, self.window, self.alpha = capacity_steps // num_envs, num_envs, window, alpha
        shape = (self.length, num_envs)
        self.obs = np.zeros(shape + observation_space.shape, dtype=observation_space.dtype)
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.ended = np.zeros(shape, dtype=bool)
        self.starts = np.zeros(shape, dtype=bool)  # the observation is an episode's first
        self.state_h = np.zeros(shape + (lstm_size,), dtype=np.float32)
        self.state_c = np.zeros(shape + (lstm_size,), dtype=np.float32)
        self.final_obs: dict[tuple[int, int], np.ndarray] = {}  # (time, env) -> last obs of a truncated episode
        self.tree = SumTree(self.length * num_envs)
        self.max_priority = 1.0
        self.position = self.size = 0  # in time steps

    def add(self, obs, actions, rewards, terminated, truncated, starts, state, final_obs) -> None:
        t = self.position
        self.obs[t], self.actions[t], self.rewards[t] = obs, actions, rewards
        self.terminated[t], self.ended[t], self.starts[t] = terminated, terminated | truncated, starts
        self.state_h[t], self.state_c[t] = state
        for e in range(self.num_envs):
            self.final_obs.pop((t, e), None)
            if truncated[e] and not terminated[e]:
                self.final_obs[(t, e)] = final_obs[e]
        self.position = (t + 1) % self.length
        self.size = min(self.length, self.size + 1)
        envs = np.arange(self.num_envs)
        self.tree.update(t * self.num_envs + envs, np.zeros(self.num_envs))  # no window may start here yet
        if self.size >= self.window:  # the window that ends here is complete
            start = (t - self.window + 1) % self.length
            self.tree.update(start * self.num_envs + envs, np.full(self.num_envs, self.max_priority ** self.alpha))

    def sample(self, batch_size: int, rng: np.random.Generator, beta: float):
        bounds = np.linspace(0.0, self.tree.total, batch_size + 1)
        slots = self.tree.find(rng.uniform(bounds[:-1], bounds[1:]))
        probabilities = self.tree[slots] / self.tree.total
        weights = (np.count_nonzero(self.tree[np.arange(self.length * self.num_envs)]) * probabilities) ** -beta
        starts, envs = slots // self.num_envs, slots % self.num_envs
        times = (starts[None, :] + np.arange(self.window)[:, None]) % self.length  # [window, batch]
        return slots, times, envs, weights / weights.max()

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(slots, priorities ** self.alpha)


class R2D1(Agent):
    name = "r2d1"

    def build(self) -> None:
        c = self.config
        num_actions = int(self.action_space.n)
        self.q_network = RecurrentQNetwork(self.observation_space, num_actions, c.hidden_size, c.lstm_size)
        self.target_network = RecurrentQNetwork(self.observation_space, num_actions, c.hidden_size, c.lstm_size)
        self.q_network.to(self.device)
        self.target_network.to(self.device).load_state_dict(self.q_network.state_dict())
        self.target_network.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_network.parameters(), lr=c.learning_rate, eps=c.optimizer_epsilon)
        self.modules = {"q_network": self.q_network, "target_network": self.target_network}
        self.optimizers = {"optimizer": self.optimizer}
        self.epsilon = linear(c.exploration_initial_eps, c.exploration_final_eps, c.exploration_fraction)
        self.beta = linear(c.priority_beta, 1.0, 1.0)
        self.reset_state()

    def live_changed(self, names: set[str]) -> None:
        """A new exploration_final_eps is the new end of the epsilon schedule."""
        c = self.config
        if "exploration_final_eps" in names:
            self.epsilon = linear(c.exploration_initial_eps, c.exploration_final_eps, c.exploration_fraction)

    # --- acting keeps a recurrent state ------------------------------------------------------------
    def reset_state(self, batch: int = 1) -> None:
        self.state = self.q_network.initial_state(batch, self.device)

    def act(self, observations: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Greedy actions, carrying the recurrent state from call to call (`reset_state` between episodes)."""
        if self.state[0].shape[0] != len(observations):
            self.reset_state(len(observations))
        with torch.no_grad():
            q, self.state = self.q_network.step(torch.as_tensor(observations, device=self.device), self.state)
        return q.argmax(dim=1).cpu().numpy() + int(self.action_space.start)

    # --- learning ----------------------------------------------------------------------------------
    def update(self, replay: SequenceReplay, beta: float) -> dict:
        c = self.config
        slots, times, envs, weights = replay.sample(c.batch_size, self.rng, beta)

        def tensor(array, dtype=None):
            return torch.as_tensor(array, device=self.device, dtype=dtype)

        obs = tensor(replay.obs[times, envs])
        actions = tensor(replay.actions[times, envs])
        rewards = tensor(replay.rewards[times, envs])
        terminated = tensor(replay.terminated[times, envs], torch.float32)
        ended = tensor(replay.ended[times, envs])
        starts = tensor(replay.starts[times, envs])
        starts[0] = False  # the stored state already belongs to the first step's episode
        state = (tensor(replay.state_h[times[0], envs]), tensor(replay.state_c[times[0], envs]))

        burn = c.burn_in
        with torch.no_grad():  # burn-in: only warm up the stored state
            _, burned = self.q_network.unroll(obs[:burn], starts[:burn], state) if burn else (None, [state])
            online_state = burned[-1]
            target_q, target_states = self.target_network.unroll(obs, starts, state)
        online_q, online_states = self.q_network.unroll(obs[burn:], starts[burn:], online_state)

        # next-state values at every step: the next row, or the kept last obs of a truncated episode
        with torch.no_grad():
            next_online = torch.cat([online_q[1:].detach(), online_q[-1:].detach()])
            next_target = torch.cat([target_q[burn + 1:], target_q[-1:]])
            for (t, b) in [(t, b) for t in range(burn, len(times)) for b in range(c.batch_size)
                           if (int(times[t, b]), int(envs[b])) in replay.final_obs]:
                final = tensor(replay.final_obs[(int(times[t, b]), int(envs[b]))])[None]
                q_online, _ = self.q_network.step(final, tuple(s[b:b + 1] for s in online_states[t - burn]))
                q_target, _ = self.target_network.step(final, tuple(s[b:b + 1] for s in target_states[t]))
                next_online[t - burn, b], next_target[t - burn, b] = q_online[0], q_target[0]
            # double Q: the online network picks, the target network values (in the rescaled space)
            next_values = next_target.gather(2, next_online.argmax(dim=2, keepdim=True)).squeeze(2)
            next_values = inverse_value_rescale(next_values, c.value_rescale_epsilon)

        steps = c.sequence_length
        returns = nstep_sequence_targets(rewards, terminated, ended, next_values, c.gamma, c.n_step_return, burn, steps)
        target = value_rescale(returns, c.value_rescale_epsilon)
        q_taken = online_q[:steps].gather(2, actions[burn:burn + steps].unsqueeze(2)).squeeze(2)
        errors = q_taken - target
        if c.delta_clip > 0:
            per_step = F.huber_loss(q_taken, target, delta=c.delta_clip, reduction="none")
        else:
            per_step = 0.5 * errors ** 2
        loss = (per_step.mean(dim=0) * tensor(weights, torch.float32)).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.q_network.parameters(), c.max_grad_norm)
        self.optimizer.step()
        magnitude = errors.detach().abs()
        priorities = c.priority_eta * magnitude.max(dim=0).values + (1 - c.priority_eta) * magnitude.mean(dim=0)
        replay.update_priorities(slots, priorities.cpu().numpy() + 1e-6)
        return {"train/loss": loss.detach(), "train/q_mean": q_taken.detach().mean()}

    def train(self, runner) -> None:
        c = self.config
        window = c.burn_in + c.sequence_length + c.n_step_return
        replay = SequenceReplay(c.buffer_size, c.num_envs, window, self.observation_space, c.lstm_size,
                                c.priority_alpha)
        with self.training_envs(c.num_envs) as (envs, observations):
            state = self.q_network.initial_state(c.num_envs, self.device)
            starts = np.ones(c.num_envs, dtype=bool)
            credit = 0.0
            while True:
                epsilon = self.epsilon(runner.progress)
                with torch.no_grad():
                    q, next_state = self.q_network.step(torch.as_tensor(observations, device=self.device), state)
                actions = q.argmax(dim=1).cpu().numpy()
                explore = self.rng.random(c.num_envs) < epsilon
                actions[explore] = self.rng.integers(0, self.action_space.n, size=int(explore.sum()))
                next_observations, rewards, terminated, truncated, infos = envs.step(
                    actions + int(self.action_space.start))
                replay.add(observations, actions, rewards, terminated, truncated, starts,
                           (state[0].cpu().numpy(), state[1].cpu().numpy()), infos.get("final_obs"))
                ended = terminated | truncated
                keep = torch.as_tensor(~ended, device=self.device).float().unsqueeze(1)
                state = (next_state[0] * keep, next_state[1] * keep)  # a new episode starts from zeros
                observations, starts = next_observations, ended
                for episode_return, length in finished_episodes(infos):
                    runner.episode(episode_return, length)

                before = self.steps_done
                keep_going = runner.advance(c.num_envs)
                if self.steps_done >= c.learning_starts and replay.tree.total > 0:
                    credit += c.replay_ratio * c.num_envs
                    while credit >= 1 and not runner.should_stop():  # a cancel ends a long phase at once
                        credit -= 1
                        runner.record(self.update(replay, self.beta(runner.progress)))
                    runner.record({"train/epsilon": epsilon})
                if crossed(before, self.steps_done, c.target_update_interval):
                    self.target_network.load_state_dict(self.q_network.state_dict())
                if not keep_going:
                    return


SPEC = AlgorithmSpec(
    name="r2d1", family=DQN_FAMILY,
    description="Recurrent replay DQN: LSTM, stored states, burn-in, value rescaling, double + dueling "
                "(Kapturowski et al. 2019).",
    config_class=R2D1Config, agent_class=R2D1,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"), action_spaces=("Discrete",))
