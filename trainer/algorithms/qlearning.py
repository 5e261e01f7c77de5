"""Tabular Q-learning, on Discrete observations or on a grid over Box observations.

Watkins 1989 / Sutton and Barto, "Reinforcement Learning: An Introduction", section 6.5:
Q(s, a) <- Q(s, a) + lr (r + gamma max_a' Q(s', a') - Q(s, a)), with epsilon-greedy exploration whose
epsilon decays multiplicatively every env step (rlib's QLearning). Box observations are binned per
dimension on a grid between bounds taken from the space, or given for unbounded dimensions
(docs/algorithms.md, tabular Q-learning checklist). The table is a buffer of a module, so a checkpoint
saves it as a tensor; `q_table()` gives it shaped by the grid for the dashboard's heatmap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from trainer.agent import Agent
from trainer.envs import real_next_observations
from trainer.params import ConfigError, param
from trainer.registry import AlgorithmSpec, CLASSIC

MAX_TABLE_ENTRIES = 50_000_000


@dataclass
class QLearningConfig:
    """Defaults learn FrozenLake-v1; benchmarks/continuous.py has settings for MountainCar-v0 on a 20 x 20 grid."""

    learning_rate: float = param(0.1, "Step size of the tabular update (rlib: lr).", low=0, low_inclusive=False,
                                 high=1, live=True)
    gamma: float = param(0.99, "Discount factor (rlib: discount).", low=0, high=1)
    learning_rate_decay: float = param(1.0, "The learning rate is multiplied by this after every env step, like "
                                            "epsilon (1 keeps it constant); a small final rate stops a coarse grid's "
                                            "greedy policy from flipping.", low=0, low_inclusive=False, high=1)
    learning_rate_min: float = param(0.0, "The learning rate never decays below this.", low=0, high=1, live=True)
    # epsilon's schedule, named as the DQN family's; it decays multiplicatively (exploration_decay), not linearly
    # over a fraction of the run (the DQN family's exploration_fraction)
    exploration_initial_eps: float = param(1.0, "Epsilon, the exploration probability, at the start (rlib: "
                                                "epsilon_greedy).", low=0, high=1)
    exploration_decay: float = param(0.9999, "Epsilon is multiplied by this after every env step.", low=0, high=1,
                                     live=True)
    exploration_final_eps: float = param(0.01, "Epsilon never decays below this.", low=0, high=1, live=True)
    grid_size: str = param("20", "Bins per Box observation dimension: one number, or one per dimension "
                                 "(e.g. 1,1,12,12).")
    low: str = param("", "Lower grid bounds for Box observations, comma-separated (one, or one per "
                         "dimension); empty takes them from the space. Needed where the space is unbounded.")
    high: str = param("", "Upper grid bounds, as for low.")
    initial_q: float = param(0.0, "Initial value of every table entry (optimistic values explore).")
    num_envs: int = param(1, "Environments stepped side by side.", low=1, high=256)

    def check(self) -> dict[str, str]:
        errors = {}
        try:
            sizes = _numbers(self.grid_size, int)
            if not sizes or min(sizes) < 1:
                raise ValueError
        except ValueError:
            errors["grid_size"] = "must be whole numbers of at least 1, comma-separated (e.g. 20 or 1,1,12,12)"
        for name in ("low", "high"):
            try:
                _numbers(getattr(self, name), float)
            except ValueError:
                errors[name] = "must be numbers separated by commas, or empty"
        if self.exploration_final_eps > self.exploration_initial_eps:
            errors["exploration_final_eps"] = "must not exceed exploration_initial_eps"
        if self.learning_rate_min > self.learning_rate:
            errors["learning_rate_min"] = "must not exceed learning_rate"
        return errors


def _numbers(text: str, kind) -> list:
    values = [kind(part.strip()) for part in str(text).split(",") if part.strip()]
    if any(not math.isfinite(v) for v in values):
        raise ValueError("not finite")
    return values


def _per_dimension(values: list, dims: int, name: str) -> np.ndarray:
    if len(values) == 1:
        values = values * dims
    if len(values) != dims:
        raise ConfigError({name: f"needs one value or {dims} values (one per observation dimension)"})
    return np.asarray(values, dtype=np.float64)


class Grid:
    """Bins each dimension of a Box observation into `sizes[d]` equal cells between `low` and `high`;
    values outside the bounds fall into the edge cells. Cells are numbered in C order."""

    def __init__(self, low: np.ndarray, high: np.ndarray, sizes: np.ndarray):
        self.low, self.high, self.sizes = low, high, sizes.astype(np.int64)
        # interior edges only: np.digitize then gives 0 .. size-1, including exactly at both bounds
        self.edges = [np.linspace(lo, hi, n + 1)[1:-1] for lo, hi, n in zip(low, high, self.sizes)]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.sizes)

    def cells(self, observations: np.ndarray) -> np.ndarray:
        """Per-dimension cell indices, shape [batch, dims]."""
        flat = np.asarray(observations, dtype=np.float64).reshape(len(observations), -1)
        return np.stack([np.digitize(flat[:, d], self.edges[d]) for d in range(flat.shape[1])], axis=1)

    def index(self, observations: np.ndarray) -> np.ndarray:
        """Flat cell numbers, as np.ravel_multi_index of `cells` (digitize is searchsorted on the right)."""
        flat = np.asarray(observations, dtype=np.float64).reshape(len(observations), -1)
        index = np.zeros(len(flat), dtype=np.int64)
        for d, edges in enumerate(self.edges):
            index = index * self.sizes[d] + np.searchsorted(edges, flat[:, d], side="right")
        return index


def state_layout(config: QLearningConfig, space) -> tuple[tuple[int, ...], Grid | None]:
    """The table's state shape for this observation space, and the grid for Box spaces.
    Raises ConfigError (keyed by field) when the grid cannot be built."""
    if isinstance(space, spaces.Discrete):
        return (int(space.n),), None
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(int(n) for n in space.nvec.reshape(-1)), None
    dims = int(np.prod(space.shape))
    sizes = _per_dimension(_numbers(config.grid_size, int), dims, "grid_size")
    low = space.low.astype(np.float64).reshape(-1).copy()
    high = space.high.astype(np.float64).reshape(-1).copy()
    if config.low.strip():
        low = _per_dimension(_numbers(config.low, float), dims, "low")
    if config.high.strip():
        high = _per_dimension(_numbers(config.high, float), dims, "high")
    errors = {}
    if not np.all(np.isfinite(low)):
        errors["low"] = (f"the observation space is unbounded below in dimensions {np.flatnonzero(~np.isfinite(low)).tolist()}"
                         f": give lower grid bounds, e.g. {','.join('-1' for _ in range(dims))}")
    if not np.all(np.isfinite(high)):
        errors["high"] = (f"the observation space is unbounded above in dimensions {np.flatnonzero(~np.isfinite(high)).tolist()}"
                          f": give upper grid bounds, e.g. {','.join('1' for _ in range(dims))}")
    if not errors and np.any(high <= low):
        errors["high"] = "every upper bound must exceed its lower bound"
    if errors:
        raise ConfigError(errors)
    return tuple(int(n) for n in sizes), Grid(low, high, sizes)


def _cell_centres(grid: Grid, dimension: int) -> list[float]:
    edges = np.linspace(grid.low[dimension], grid.high[dimension], grid.sizes[dimension] + 1)
    return [round(float(x), 6) for x in (edges[:-1] + edges[1:]) / 2]


def _drawn_map_shape(env_id: str, states: int) -> tuple[int, int] | None:
    """(rows, columns) of a grid-world env that numbers its cells row by row (FrozenLake, CliffWalking)."""
    from trainer.envs import make_env

    env = make_env(env_id)
    try:
        desc = getattr(env.unwrapped, "desc", None)
        shape = getattr(env.unwrapped, "shape", None)
    finally:
        env.close()
    if desc is not None and np.ndim(desc) == 2 and np.size(desc) == states:
        return tuple(np.shape(desc))
    if shape is not None and len(shape) == 2 and math.prod(shape) == states:
        return tuple(shape)
    return None


def check_qlearning_env(config, observation_space, action_space) -> dict[str, str]:
    try:
        shape, _ = state_layout(config, observation_space)
    except ConfigError as error:
        return error.errors
    entries = math.prod(shape) * int(action_space.n)
    if entries > MAX_TABLE_ENTRIES:
        count = f"{entries:,}" if entries < 10**30 else f"about 10^{math.floor(math.log10(entries))}"
        return {"grid_size": f"the table would hold {count} entries (at most {MAX_TABLE_ENTRIES:,}): use fewer bins"}
    return {}


class QTable(nn.Module):
    def __init__(self, num_states: int, num_actions: int, initial_q: float):
        super().__init__()
        self.register_buffer("table", torch.full((num_states, num_actions), float(initial_q), dtype=torch.float64))


class QLearning(Agent):
    name = "qlearning"

    def build(self) -> None:
        c = self.config
        self.device = torch.device("cpu")  # a table lookup gains nothing from a GPU
        self.state_shape, self.grid = state_layout(c, self.observation_space)
        self.num_actions = int(self.action_space.n)
        self.q = QTable(math.prod(self.state_shape), self.num_actions, c.initial_q)
        # shares memory with the tensor the checkpoint saves (none for a shape-only agent on the meta device)
        self.table = None if self.q.table.is_meta else self.q.table.numpy()
        self.modules = {"q_table": self.q}
        self.epsilon = c.exploration_initial_eps
        self.learning_rate = c.learning_rate  # decays every env step, as epsilon does

    def live_changed(self, names: set[str]) -> None:
        """A new learning_rate is the current rate, and decays from there."""
        if "learning_rate" in names:
            self.learning_rate = self.config.learning_rate

    def states(self, observations: np.ndarray) -> np.ndarray:
        """Row indices of the table for a batch of observations."""
        if self.grid is not None:
            return self.grid.index(observations)
        if isinstance(self.observation_space, spaces.Discrete):
            return np.asarray(observations, dtype=np.int64).reshape(-1) - int(self.observation_space.start)
        return np.ravel_multi_index(tuple(np.asarray(observations, dtype=np.int64).reshape(
            len(observations), -1).T), self.state_shape)

    def q_table(self) -> np.ndarray:
        """The table shaped (*state_shape, num_actions): grid cells (or Discrete states) by actions."""
        return self.table.reshape(*self.state_shape, self.num_actions).copy()

    def value_map(self) -> dict | None:
        """The table as a heatmap for the dashboard: max_a Q and the greedy action per state, laid out in
        2-D (a 2-D grid or MultiDiscrete space; a Discrete space whose env draws a square map, such as
        FrozenLake, in that map's shape; other Discrete spaces as one row). None above two dimensions.
        States never updated (every entry still `initial_q`) have no value."""
        table = self.q_table()
        shape = table.shape[:-1]
        if len(shape) > 2:
            return None
        untouched = np.all(table == self.config.initial_q, axis=-1)
        values = np.where(untouched, np.nan, table.max(axis=-1))
        actions = table.argmax(axis=-1) + int(self.action_space.start)
        names = ["state", ""]
        if len(shape) == 2:  # rows are the second dimension, so the first runs along the x axis
            values, actions, untouched = values.T, actions.T, untouched.T
            names = ["dimension 0", "dimension 1"]
        elif map_shape := _drawn_map_shape(self.env_id, shape[0]):
            values, actions, untouched = (a.reshape(map_shape) for a in (values, actions, untouched))
            names = ["column", "row"]
        else:
            values, actions, untouched = values[None], actions[None], untouched[None]
        x_axis, y_axis = ([_cell_centres(self.grid, d) for d in (0, 1)] if self.grid is not None and len(shape) == 2
                          else [list(range(values.shape[1])), list(range(values.shape[0]))])
        return {"x": x_axis, "y": y_axis, "x_title": names[0], "y_title": names[1],
                "values": [[None if np.isnan(v) else float(v) for v in row] for row in values],
                "actions": [[None if untouched_cell else int(action) for action, untouched_cell in zip(row, flags)]
                            for row, flags in zip(actions, untouched)]}

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        states = self.states(observations)
        if deterministic:
            return self.table[states].argmax(axis=1) + int(self.action_space.start)
        return self.explore(states) + int(self.action_space.start)

    def explore(self, states: np.ndarray) -> np.ndarray:
        """Epsilon-greedy action indices (from 0) for table rows; ties between the greedy actions are broken
        at random, so an untouched state does not always pick action 0."""
        rows = self.table[states]
        best = rows == rows.max(axis=1, keepdims=True)
        # the k-th best action, k uniform: the same draws as rng.choice among each row's best, one row at a time
        k = self.rng.integers(0, best.sum(axis=1))
        actions = (best & (np.cumsum(best, axis=1) == k[:, None] + 1)).argmax(axis=1)
        explore = self.rng.random(len(actions)) < self.epsilon
        actions[explore] = self.rng.integers(0, self.num_actions, size=int(explore.sum()))
        return actions

    def update(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
               terminated: np.ndarray) -> np.ndarray:
        """One tabular step per transition; returns the TD errors."""
        c = self.config
        # no bootstrap past a true terminal state; a time-limit truncation is bootstrapped (P1)
        target = rewards + c.gamma * (1.0 - terminated) * self.table[next_states].max(axis=1)
        td_errors = target - self.table[states, actions]
        # unbuffered, in order: where two sub-envs share an entry, both steps are added
        np.add.at(self.table, (states, actions), self.learning_rate * td_errors)
        return td_errors

    def train(self, runner) -> None:
        c = self.config
        with self.training_envs(c.num_envs) as (envs, observations):
            episode_returns = np.zeros(c.num_envs)
            episode_lengths = np.zeros(c.num_envs, dtype=np.int64)
            start = int(self.action_space.start)
            states = self.states(observations)
            while True:
                actions = self.explore(states)
                next_observations, rewards, terminated, truncated, infos = envs.step(actions + start)
                done = terminated | truncated
                next_states = self.states(next_observations)  # where each sub-env goes on from
                real_next = next_states
                if done.any():  # an ended episode's real last state, not the reset one it goes on from
                    real_next = self.states(real_next_observations(next_observations, done, infos))
                td_errors = self.update(states, actions, rewards.astype(np.float64), real_next,
                                        terminated.astype(np.float64))
                states = next_states
                self.epsilon = max(c.exploration_final_eps, self.epsilon * c.exploration_decay ** c.num_envs)
                self.learning_rate = max(c.learning_rate_min, self.learning_rate * c.learning_rate_decay ** c.num_envs)

                episode_returns += rewards
                episode_lengths += 1
                for i in np.flatnonzero(done):
                    runner.episode(episode_returns[i], episode_lengths[i])
                    episode_returns[i], episode_lengths[i] = 0.0, 0
                runner.record({"train/td_error": float(np.abs(td_errors).mean()), "train/epsilon": self.epsilon,
                               "train/learning_rate": self.learning_rate})
                if not runner.advance(c.num_envs):
                    return

    def extra_state(self) -> dict:
        return {"epsilon": self.epsilon, "learning_rate": self.learning_rate}

    def load_extra_state(self, state: dict) -> None:
        self.epsilon = float(state.get("epsilon", self.config.exploration_initial_eps))
        self.learning_rate = float(state.get("learning_rate", self.config.learning_rate))


SPEC = AlgorithmSpec(
    name="qlearning",
    family=CLASSIC,
    description="Tabular Q-learning with epsilon-greedy exploration; Box observations binned on a grid.",
    config_class=QLearningConfig,
    agent_class=QLearning,
    observation_spaces=("Discrete", "MultiDiscrete", "Box"),
    action_spaces=("Discrete",),
    check_env=check_qlearning_env,
)
