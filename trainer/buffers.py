"""Replay storage for the off-policy algorithms; rollouts, returns and advantages for the on-policy ones."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class ReplayBatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor  # with n-step sampling: the discounted sum of the window's rewards
    next_obs: torch.Tensor  # the observation to bootstrap from
    terminated: torch.Tensor  # 1.0 only at a true terminal state; time-limit truncations stay 0 (bootstrapped)
    discounts: torch.Tensor | None = None  # gamma ** (steps in the window), when sampled with a gamma
    weights: torch.Tensor | None = None  # importance-sampling weights (prioritized replay)
    indices: np.ndarray | None = None  # where the samples live, to update their priorities

    def part(self, rows: slice) -> "ReplayBatch":
        """The samples in `rows`."""
        return ReplayBatch(*(None if field is None else field[rows] for field in self))


def to_device(arrays: list[np.ndarray | None], device: torch.device) -> list[torch.Tensor | None]:
    """The arrays as tensors on `device` (None stays None). To a GPU they go in one copy that the CPU does
    not wait for: packed into one pinned host buffer (torch's caching host allocator reuses it once the
    copy is done), copied, and unpacked there as views. A copy per array from pageable memory would make
    the CPU wait for each, six times a batch."""
    if device.type != "cuda":
        return [None if array is None else torch.as_tensor(array) for array in arrays]
    staging, layout = packed(arrays, pin_memory=True)
    return unpacked(staging.to(device, non_blocking=True), layout)


def packed(arrays: list[np.ndarray | None], pin_memory: bool = False) -> tuple[torch.Tensor, list]:
    """The arrays' bytes one after the other in one uint8 tensor, each 8-byte aligned, and where each lies."""
    layout, total = [], 0
    for array in arrays:
        if array is None:
            layout.append(None)
            continue
        layout.append((total, array.nbytes, torch.from_numpy(np.empty(0, array.dtype)).dtype, array.shape))
        total += -(-array.nbytes // 8) * 8
    staging = torch.empty(total, dtype=torch.uint8, pin_memory=pin_memory)
    host = staging.numpy()
    for array, place in zip(arrays, layout):
        if array is not None:
            host[place[0]:place[0] + place[1]] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return staging, layout


def unpacked(staging: torch.Tensor, layout: list) -> list[torch.Tensor | None]:
    """The tensors that `packed` laid out, as views into `staging` (wherever it now is)."""
    return [None if place is None else staging[place[0]:place[0] + place[1]].view(place[2]).view(place[3])
            for place in layout]


class ReplayBuffer:
    """A ring buffer of transitions, each stored with its real next observation.

    Storing `next_obs` explicitly (rather than reading obs[i + 1]) keeps the last observation of a
    truncated episode, which the bootstrap needs (docs/algorithms.md, DQN checklist). Transitions of a
    vector env arrive `num_envs` at a time, so the next step of the same sub-env sits `num_envs` slots
    later; the capacity is rounded down to a multiple of `num_envs` to keep that true across the wrap.
    """

    def __init__(self, capacity: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (), action_dtype=np.int64,
                 device: torch.device | str = "cpu", num_envs: int = 1):
        self.num_envs = int(num_envs)
        self.capacity = max(self.num_envs, int(capacity) // self.num_envs * self.num_envs)
        self.device = torch.device(device)
        self._allocate_observations(obs_shape, obs_dtype)
        self.actions = np.zeros((self.capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.ended = np.zeros(self.capacity, dtype=bool)  # terminated or truncated: an n-step window stops here
        self.position = 0  # where the next transition goes
        self.size = 0

    def __len__(self) -> int:
        return self.size

    # --- observation storage: overridden by the frame-deduplicating buffer -------------------------
    def _allocate_observations(self, obs_shape: tuple, obs_dtype) -> None:
        self.obs = np.zeros((self.capacity, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((self.capacity, *obs_shape), dtype=obs_dtype)

    def _store_observations(self, indices: np.ndarray, obs, next_obs, ended: np.ndarray) -> None:
        self.obs[indices] = obs
        self.next_obs[indices] = next_obs

    def observations_at(self, indices: np.ndarray) -> np.ndarray:
        return self.obs[indices]

    def next_observations_at(self, indices: np.ndarray) -> np.ndarray:
        return self.next_obs[indices]

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.size, size=batch_size)

    def unsampleable(self) -> np.ndarray:
        """Stored slots that must not be sampled now."""
        return np.zeros(0, dtype=np.int64)

    # --- transitions ----------------------------------------------------------------------------------
    def add(self, obs, actions, rewards, next_obs, terminated, truncated=None) -> np.ndarray:
        """Add one transition per sub-env (arrays with a leading batch dimension); returns their slots."""
        count = len(rewards)
        indices = (self.position + np.arange(count)) % self.capacity
        ended = np.logical_or(terminated, truncated) if truncated is not None else np.asarray(terminated, bool)
        self._store_observations(indices, obs, next_obs, ended)
        self.actions[indices] = actions
        self.rewards[indices] = rewards
        self.terminated[indices] = terminated
        self.ended[indices] = ended
        self.position = int((self.position + count) % self.capacity)
        self.size = min(self.capacity, self.size + count)
        return indices

    def sample(self, batch_size: int, rng: np.random.Generator, n_step: int = 1,
               gamma: float | None = None) -> ReplayBatch:
        return self.batch(self.sample_indices(batch_size, rng), n_step, gamma)

    def batch(self, indices: np.ndarray, n_step: int = 1, gamma: float | None = None) -> ReplayBatch:
        """The transitions at `indices`; with `n_step` > 1, n-step returns.

        A window of the same sub-env's next steps stops after the first step that ended its episode
        (terminated or truncated) and at the newest stored step; its return is sum_k gamma^k r_k and
        the bootstrap uses the last step's real next observation, discounted by gamma^m for the m
        steps actually in the window, and masked only when that step was a true termination.
        """
        if n_step == 1:
            discounts = None if gamma is None else np.full(len(indices), gamma, dtype=np.float32)
            return ReplayBatch(*to_device([self.observations_at(indices), self.actions[indices], self.rewards[indices],
                                           self.next_observations_at(indices), self.terminated[indices], discounts],
                                          self.device), indices=indices)
        offsets = np.arange(n_step) * self.num_envs
        window = (indices[:, None] + offsets) % self.capacity
        newer = (self.position - 1 - indices) % self.capacity  # transitions stored after each sample
        stored = offsets[None, :] <= newer[:, None]
        ended_before = np.cumsum(self.ended[window], axis=1) - self.ended[window]  # ends strictly before step k
        included = stored & (ended_before == 0)
        steps = included.sum(axis=1)  # m >= 1: the sampled transition itself is always in
        powers = gamma ** np.arange(n_step, dtype=np.float64)
        returns = (self.rewards[window] * powers * included).sum(axis=1).astype(np.float32)
        last = window[np.arange(len(indices)), steps - 1]
        discounts = (gamma ** steps).astype(np.float32)
        return ReplayBatch(*to_device([self.observations_at(indices), self.actions[indices], returns,
                                       self.next_observations_at(last), self.terminated[last], discounts], self.device),
                           indices=indices)


class FrameStackReplayBuffer(ReplayBuffer):
    """Replay for stacked frames (K, H, W) that stores each frame once: about 7 KB per Atari
    transition instead of 56 KB for stacked `obs` and `next_obs`.

    Slot i keeps the newest frame of its observation; the stack is rebuilt from the same sub-env's
    earlier slots, repeating the episode's first frame before the episode began (as Gymnasium's
    FrameStackObservation pads). The next observation is the next slot's frame, or, for a step that
    ended its episode, the final frame kept aside; the newest step of each sub-env keeps its next
    frame in `pending`. When the buffer is full, the oldest K - 1 steps of each sub-env have lost
    their history and are not sampled.
    """

    def _allocate_observations(self, obs_shape: tuple, obs_dtype) -> None:
        self.stack = obs_shape[0]
        self.frames = np.zeros((self.capacity, *obs_shape[1:]), dtype=obs_dtype)
        self.starts = np.zeros(self.capacity, dtype=bool)  # the observation is an episode's first
        self.final_frames: dict[int, np.ndarray] = {}  # slot -> last frame of the episode it ended
        self.pending = np.zeros((self.num_envs, *obs_shape[1:]), dtype=obs_dtype)
        self.episode_starting = np.ones(self.num_envs, dtype=bool)

    def _store_observations(self, indices: np.ndarray, obs, next_obs, ended: np.ndarray) -> None:
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        self.frames[indices] = obs[:, -1]
        self.starts[indices] = self.episode_starting
        for slot in indices:
            self.final_frames.pop(int(slot), None)
        for i in np.flatnonzero(ended):
            self.final_frames[int(indices[i])] = next_obs[i, -1].copy()
        self.pending[:] = next_obs[:, -1]
        self.episode_starting = np.asarray(ended, dtype=bool).copy()

    def observations_at(self, indices: np.ndarray) -> np.ndarray:
        back = (indices[:, None] - np.arange(self.stack) * self.num_envs) % self.capacity  # newest first
        starts = self.starts[back]
        # before the episode's first step, repeat its first frame
        first = np.where(starts.any(axis=1), starts.argmax(axis=1), self.stack - 1)
        steps = np.minimum(np.arange(self.stack)[None, :], first[:, None])
        slots = np.take_along_axis(back, steps, axis=1)
        return self.frames[slots[:, ::-1]]

    def next_observations_at(self, indices: np.ndarray) -> np.ndarray:
        stacks = self.observations_at(indices)
        following = (indices + self.num_envs) % self.capacity
        newest = ((self.position - 1 - indices) % self.capacity) < self.num_envs
        next_frames = self.frames[following]
        for row, slot in enumerate(indices):
            if int(slot) in self.final_frames:
                next_frames[row] = self.final_frames[int(slot)]
            elif newest[row]:
                next_frames[row] = self.pending[slot % self.num_envs]
        return np.concatenate([stacks[:, 1:], next_frames[:, None]], axis=1)

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        if self.size < self.capacity:
            return rng.integers(0, self.size, size=batch_size)
        skip = (self.stack - 1) * self.num_envs  # the oldest steps, whose earlier frames were overwritten
        return (self.position + skip + rng.integers(0, self.capacity - skip, size=batch_size)) % self.capacity

    def unsampleable(self) -> np.ndarray:
        if self.size < self.capacity:
            return np.zeros(0, dtype=np.int64)
        return (self.position + np.arange((self.stack - 1) * self.num_envs)) % self.capacity

    def bytes_per_transition(self) -> float:
        per_slot = sum(array.itemsize * int(np.prod(array.shape[1:])) for array in (
            self.frames, self.starts, self.actions, self.rewards, self.terminated, self.ended))
        return float(per_slot)


class SumTree:
    """Sums of priorities in a binary tree: O(log N) update and proportional sampling, vectorised.

    Leaves live at [capacity, 2 * capacity) of a power-of-two-sized array; node i sums 2i and 2i + 1.
    """

    def __init__(self, capacity: int):
        self.capacity = 1 << max(0, int(capacity - 1).bit_length())
        self.tree = np.zeros(2 * self.capacity, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def __getitem__(self, indices):
        return self.tree[np.asarray(indices) + self.capacity]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        nodes = np.asarray(indices, dtype=np.int64) + self.capacity
        self.tree[nodes] = priorities  # with repeated indices the last one wins, as with a loop
        depth, tree = self.capacity.bit_length() - 1, self.tree  # every leaf is `depth` levels below the root
        if len(nodes) <= 4:  # one env's new transition: plain integers are 15x as fast as arrays of one
            for node in nodes.tolist():
                for _ in range(depth):
                    node >>= 1
                    tree[node] = tree[2 * node] + tree[2 * node + 1]
            return
        for _ in range(depth):
            nodes = nodes >> 1  # a parent repeated in `nodes` is given the same sum twice: no np.unique needed
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """The leaf index where each cumulative `value` (in [0, total)) falls."""
        values = np.array(values, dtype=np.float64)
        nodes = np.ones(len(values), dtype=np.int64)
        while nodes[0] < self.capacity:
            left = 2 * nodes
            go_right = values >= self.tree[left]
            values = np.where(go_right, values - self.tree[left], values)
            nodes = np.where(go_right, left + 1, left)
        return nodes - self.capacity


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

    P(i) = p_i^alpha / sum_k p_k^alpha with p_i = |delta_i| + epsilon; new transitions get the largest
    priority seen so far; importance weights (N P(i))^-beta are normalised by the batch's largest.
    """

    def __init__(self, *args, alpha: float = 0.6, epsilon: float = 1e-6, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha = alpha
        self.epsilon = epsilon
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0  # of p, before the power

    def add(self, *args, **kwargs) -> np.ndarray:
        indices = super().add(*args, **kwargs)
        self.tree.update(indices, np.full(len(indices), self.max_priority ** self.alpha))
        hidden = self.unsampleable()
        if len(hidden):
            self.tree.update(hidden, np.zeros(len(hidden)))
        return indices

    def sample(self, batch_size: int, rng: np.random.Generator, n_step: int = 1, gamma: float | None = None,
               beta: float = 0.4) -> ReplayBatch:
        # one draw from each of batch_size equal slices of the total (stratified)
        bounds = np.linspace(0.0, self.tree.total, batch_size + 1)
        values = rng.uniform(bounds[:-1], bounds[1:])
        indices = np.minimum(self.tree.find(values), self.size - 1)
        probabilities = self.tree[indices] / self.tree.total
        weights = (self.size * probabilities) ** (-beta)
        weights /= weights.max()
        batch = self.batch(indices, n_step, gamma)
        return batch._replace(weights=torch.as_tensor(weights, dtype=torch.float32, device=self.device))

    def update_priorities(self, indices: np.ndarray, errors: np.ndarray) -> None:
        priorities = np.abs(errors) + self.epsilon
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(indices, priorities ** self.alpha)


# --- on-policy storage: returns, advantages, rollouts and whole episodes ---------------------------------------
#
# Conventions for the (steps, envs) arrays below, one row per vector step t:
#   terminated[t]    1 where the episode reached a terminal state at t: nothing is bootstrapped after it.
#   episode_ends[t]  1 where the episode ended at t for any reason (terminated or truncated by a time
#                    limit): returns and advantages do not flow back across it.
#   next_values[t]   V(s_{t+1}) of the real next state. After a truncation that is V of the episode's last
#                    observation (infos["final_obs"]), not of the reset observation (docs/algorithms.md, P1, P2).


def generalized_advantages(rewards, values, next_values, terminated, episode_ends, gamma: float,
                           gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE (Schulman et al. 2016, https://arxiv.org/abs/1506.02438); returns (advantages, returns).

        delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - episode_ends_t) * A_{t+1}
        R_t     = A_t + V(s_t)             (the value targets)
    """
    not_terminal = 1.0 - np.asarray(terminated, dtype=np.float32)
    continues = 1.0 - np.asarray(episode_ends, dtype=np.float32)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = np.zeros_like(deltas, dtype=np.float32)
    running = np.zeros(deltas.shape[1:], dtype=np.float32)
    for t in reversed(range(len(deltas))):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values


def n_step_returns(rewards, next_values, terminated, episode_ends, gamma: float) -> np.ndarray:
    """Discounted returns to the end of the rollout, bootstrapped from the critic where it is cut off:

        G_t = r_t + gamma * G_{t+1}                          inside an episode,
        G_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1})  where the episode ends at t (truncation bootstraps),
        G_{T-1} = r_{T-1} + gamma * V(s_T)                   at the rollout's end.

    With n rollout steps, the first step's return looks n steps ahead (A2C; Mnih et al. 2016). Equal
    to GAE's returns with lambda = 1.
    """
    not_terminal = 1.0 - np.asarray(terminated, dtype=np.float32)
    ends = np.asarray(episode_ends, dtype=bool)
    returns = np.zeros_like(rewards, dtype=np.float32)
    running = np.asarray(next_values[-1], dtype=np.float32)
    for t in reversed(range(len(rewards))):
        bootstrap = np.where(ends[t], not_terminal[t] * next_values[t], running)
        running = rewards[t] + gamma * bootstrap
        returns[t] = running
    return returns


def discounted_returns(rewards, gamma: float, bootstrap: float = 0.0) -> np.ndarray:
    """Reward-to-go of one whole episode, G_t = sum_k gamma^k r_{t+k} (+ gamma^(T-t) * bootstrap)."""
    returns = np.zeros(len(rewards), dtype=np.float32)
    running = float(bootstrap)
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


class RolloutBatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor  # of the actions under the policy that collected them
    values: torch.Tensor  # V(s_t) when collected (PPO clips the value loss around these)
    returns: torch.Tensor  # value targets
    advantages: torch.Tensor
    int_values: torch.Tensor | None = None  # RND's intrinsic value head, when the buffer keeps one
    int_returns: torch.Tensor | None = None
    next_obs: torch.Tensor | None = None  # RND: the real next observations (unnormalised)


class RolloutBuffer:
    """One rollout of `num_steps` vector steps from `num_envs` sub-envs, for A2C, PPO and RND-PPO.

    Per step: `add(...)`, then `set_final_values(envs, values)` for the sub-envs whose episode ended
    (V of their real last observation). After the rollout: `set_values(...)` (the collecting policy's
    log-probs and values, from one batched pass), `compute_advantages(last_values, ...)`, then
    `epochs(...)` or `everything()` for the update.
    """

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (),
                 action_dtype=np.int64, intrinsic: bool = False, device: torch.device | str = "cpu",
                 obs_on_device: bool = False):
        self.num_steps, self.num_envs = int(num_steps), int(num_envs)
        self.device = torch.device(device)
        shape = (self.num_steps, self.num_envs)
        # on a GPU the observations are kept there as they come (uint8 images stay uint8): each crosses once,
        # when the policy acts on it, and the update reads them where they are
        self.obs_on_device = obs_on_device
        if obs_on_device:
            self.obs = torch.zeros((*shape, *obs_shape), dtype=torch.from_numpy(np.empty(0, obs_dtype)).dtype,
                                   device=self.device)
        else:
            self.obs = np.zeros((*shape, *obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((*shape, *action_shape), dtype=action_dtype)
        self.log_probs = np.zeros(shape, dtype=np.float32)
        self.values = np.zeros(shape, dtype=np.float32)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=np.float32)
        self.episode_ends = np.zeros(shape, dtype=np.float32)
        self.final_values = np.zeros(shape, dtype=np.float32)  # V(last obs) where an episode ended
        self.advantages = np.zeros(shape, dtype=np.float32)
        self.returns = np.zeros(shape, dtype=np.float32)
        self.intrinsic = intrinsic
        if intrinsic:  # RND: the real next observations, intrinsic rewards and the intrinsic value head
            self.next_obs = np.zeros_like(self.obs)
            self.int_values = np.zeros(shape, dtype=np.float32)
            self.int_rewards = np.zeros(shape, dtype=np.float32)
            self.int_returns = np.zeros(shape, dtype=np.float32)
        self.step = 0

    def reset(self) -> None:
        self.step = 0

    @property
    def full(self) -> bool:
        return self.step == self.num_steps

    def add(self, obs, actions, rewards, terminated, truncated, next_obs=None) -> None:
        t = self.step
        if self.obs_on_device:
            self.obs[t].copy_(torch.as_tensor(obs), non_blocking=True)
        else:
            self.obs[t] = obs
        self.actions[t] = actions
        self.rewards[t] = rewards
        self.terminated[t] = terminated
        self.episode_ends[t] = np.logical_or(terminated, truncated)
        self.final_values[t] = 0.0
        if self.intrinsic:
            self.next_obs[t] = next_obs
        self.step = t + 1

    def set_values(self, log_probs: np.ndarray, values: np.ndarray) -> None:
        """The collecting policy's log-probabilities of the stored actions and its values, for the whole
        rollout at once: (steps * envs,) and (steps * envs, heads), in step-major order."""
        shape = (self.num_steps, self.num_envs)
        self.log_probs[:] = log_probs.reshape(shape)
        self.values[:] = values[:, 0].reshape(shape)
        if self.intrinsic:
            self.int_values[:] = values[:, 1].reshape(shape)

    def set_final_values(self, envs: np.ndarray, values: np.ndarray) -> None:
        """V(s_T) for sub-envs whose episode ended at the step just added (used only where truncated)."""
        self.final_values[self.step - 1, envs] = values

    def next_values(self, values: np.ndarray, last_values: np.ndarray) -> np.ndarray:
        """V(s_{t+1}) of the real next state for every step (see the conventions above)."""
        following = np.concatenate([values[1:], np.asarray(last_values, dtype=np.float32)[None]], axis=0)
        return np.where(self.episode_ends > 0, self.final_values, following)

    def compute_advantages(self, last_values: np.ndarray, gamma: float, gae_lambda: float) -> None:
        """GAE advantages and value targets; `last_values` is V of the observations after the last step."""
        next_values = self.next_values(self.values, last_values)
        self.advantages, self.returns = generalized_advantages(
            self.rewards, self.values, next_values, self.terminated, self.episode_ends, gamma, gae_lambda)

    def compute_n_step_returns(self, last_values: np.ndarray, gamma: float) -> None:
        """n-step bootstrapped returns as value targets, advantages = returns - V(s_t) (A2C)."""
        next_values = self.next_values(self.values, last_values)
        self.returns = n_step_returns(self.rewards, next_values, self.terminated, self.episode_ends, gamma)
        self.advantages = self.returns - self.values

    def _flat_tensors(self) -> list[torch.Tensor | None]:
        size = self.num_steps * self.num_envs

        def flat(array):
            return torch.as_tensor(array.reshape(size, *array.shape[2:]), device=self.device)

        arrays = [self.obs, self.actions, self.log_probs, self.values, self.returns, self.advantages]
        tensors = [flat(a) for a in arrays]
        if self.intrinsic:
            tensors += [flat(self.int_values), flat(self.int_returns), flat(self.next_obs)]
        return tensors

    def everything(self) -> RolloutBatch:
        return RolloutBatch(*self._flat_tensors())

    def minibatches(self, batch_size: int, rng: np.random.Generator, normalize_advantages: bool = False):
        """One pass over the rollout in random minibatches of `batch_size` (the last one may be smaller)."""
        for _, batch in self.epochs(1, batch_size, rng, normalize_advantages):
            yield batch

    def epochs(self, n_epochs: int, batch_size: int, rng: np.random.Generator, normalize_advantages: bool = False,
               group=None):
        """(epoch, minibatch) for `n_epochs` passes over the rollout, each in a new random order.

        With `normalize_advantages` each minibatch's advantages have zero mean and unit std (per minibatch,
        as in SB3 and CleanRL; a minibatch of one is left alone). When one minibatch holds the whole rollout,
        it is built and normalised once and handed out every epoch: the order of its rows changes nothing.

        In a run on several processes (`group`, trainer/distributed.py) this buffer is this process's share of the
        rollout, and the k-th minibatch of every process together make the run's k-th minibatch: its advantages are
        normalised with the mean and std of all its parts, as one process would on the whole (the statistics of a
        whole epoch's minibatches are summed over the processes at once, at the start of the epoch).
        """
        tensors = self._flat_tensors()
        size = self.num_steps * self.num_envs
        together = normalize_advantages and group is not None and group.size > 1

        def batch_of(parts, statistics=None):
            advantages = parts[5]
            if statistics is not None:  # (mean, std, size) of the run's minibatch, over every process's part
                mean, std, count = statistics
                if count > 1:
                    parts = [*parts[:5], (advantages - mean) / (std + 1e-8), *parts[6:]]
            elif normalize_advantages and len(advantages) > 1:
                parts = [*parts[:5], (advantages - advantages.mean()) / (advantages.std() + 1e-8), *parts[6:]]
            return RolloutBatch(*parts)

        if batch_size >= size:
            everything = batch_of(tensors, group.minibatch_statistics(tensors[5], size)[0] if together else None)
            for epoch in range(n_epochs):
                yield epoch, everything
            return
        for epoch in range(n_epochs):
            order = torch.as_tensor(rng.permutation(size), device=self.device)
            statistics = group.minibatch_statistics(tensors[5][order], batch_size) if together else None
            for number, start in enumerate(range(0, size, batch_size)):
                index = order[start:start + batch_size]
                yield epoch, batch_of([t[index] for t in tensors], statistics[number] if together else None)


class Episode(NamedTuple):
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool  # False when a time limit cut it short
    final_obs: np.ndarray  # the observation after the last action


class EpisodeBuffer:
    """Collects whole episodes from several sub-envs for REINFORCE and VPG.

    Steps are kept per sub-env until that sub-env's episode ends; only then does the episode join
    `finished`. A batch is therefore never a cut-off trajectory (unlike Bolts' fixed-size batches).
    """

    def __init__(self, num_envs: int):
        self.num_envs = int(num_envs)
        self._open: list[list[tuple]] = [[] for _ in range(self.num_envs)]
        self.finished: list[Episode] = []

    def add(self, obs, actions, rewards, terminated, truncated, final_obs=None) -> None:
        """One vector step; `final_obs[i]` is the real last observation where sub-env i's episode ended."""
        for i in range(self.num_envs):
            self._open[i].append((obs[i], actions[i], rewards[i]))
            if terminated[i] or truncated[i]:
                steps = self._open[i]
                self.finished.append(Episode(
                    obs=np.stack([s[0] for s in steps]), actions=np.stack([s[1] for s in steps]),
                    rewards=np.array([s[2] for s in steps], dtype=np.float32), terminated=bool(terminated[i]),
                    final_obs=np.asarray(final_obs[i]) if final_obs is not None else None))
                self._open[i] = []

    def take(self) -> list[Episode]:
        """The finished episodes, oldest first; the buffer keeps the episodes still running."""
        episodes, self.finished = self.finished, []
        return episodes


class PrioritizedFrameStackReplayBuffer(PrioritizedReplayBuffer, FrameStackReplayBuffer):
    """Prioritized sampling over frame-deduplicated storage (Rainbow on Atari)."""
