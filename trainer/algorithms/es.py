"""Evolution Strategies, OpenAI-style.

Salimans et al. 2017, "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
https://arxiv.org/abs/1703.03864. Each iteration perturbs the policy's parameters theta with antithetic
pairs theta +- sigma eps_i, plays one episode (or more) with each candidate in parallel worker processes,
shapes the returns by centred ranks and steps along

    g = 1 / (2 n sigma) sum_i (F(theta + sigma eps_i) - F(theta - sigma eps_i)) eps_i

with Adam (or plain SGD, rlib's rule). Workers receive noise seeds, never noise vectors, and every
pair plays the same env seed (common random numbers). Observation statistics, when normalising, are
frozen for a whole generation so every candidate sees the same normaliser (docs/algorithms.md, ES checklist).
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from trainer.agent import Agent
from trainer.envs import make_env, space_from_json, space_to_json
from trainer.networks import ObservationEncoder, mlp, parse_hidden_layers
from trainer.params import param, processes_param
from trainer.registry import AlgorithmSpec, CLASSIC
from trainer.normalization import RunningMeanStd


@dataclass
class ESConfig:
    """Defaults are rlib's EvolutionStrategy (30 agents, lr 0.03, sigma 0.1) with the OpenAI starter's
    Adam, L2 and centred ranks; they solve CartPole-v1 (benchmarks/continuous.py)."""

    num_agents: int = param(30, "Candidates per iteration, in antithetic pairs (an even number).", low=2,
                            high=100_000)
    sigma: float = param(0.1, "Std of the parameter perturbations.", low=0, low_inclusive=False, live=True)
    learning_rate: float = param(0.03, "Step size of the update (rlib: lr).", low=0, low_inclusive=False, high=10,
                                 live=True)
    optimizer: str = param("adam", "adam (the OpenAI starter), or sgd (rlib's plain update).",
                           choices=("adam", "sgd"))
    l2_coef: float = param(0.005, "L2 penalty on the parameters, added to the update.", low=0)
    fitness_shaping: str = param("centered_ranks", "centered_ranks (ranks scaled to [-0.5, 0.5]) or none (raw "
                                                   "returns).", choices=("centered_ranks", "none"))
    episodes_per_candidate: int = param(1, "Episodes each candidate plays; its fitness is their mean return.",
                                        low=1, high=1000)
    hidden_layers: str = param("32,32", "Hidden layer sizes of the policy network, comma-separated "
                                        "(empty for a linear policy).")
    normalize_observations: bool = param(False, "Normalise Box observations with running statistics "
                                               "(frozen within each iteration).")
    num_workers: int = param(0, "Worker processes evaluating candidates, in each of the run's processes (0: one per "
                                "CPU core, shared between them; 1: no extra process).", low=0, high=1024)
    # each process plays its share of every generation's pairs (several hosts: trainer/distributed.py)
    processes: int = processes_param()

    def check(self) -> dict[str, str]:
        errors = {}
        if self.num_agents % 2:
            errors["num_agents"] = "must be even: candidates come in antithetic pairs"
        if self.processes > self.num_agents // 2:
            errors["processes"] = f"at most one process per antithetic pair (num_agents / 2 = {self.num_agents // 2})"
        return errors


def policy_output_size(action_space) -> int:
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(action_space.nvec.sum())
    return int(np.prod(action_space.shape))  # Box, MultiBinary


class Policy(nn.Module):
    """A deterministic policy: an MLP whose outputs are decoded into actions of any supported space."""

    def __init__(self, observation_space, action_space, hidden_layers: tuple[int, ...]):
        super().__init__()
        self.action_space = action_space
        self.encoder = ObservationEncoder(observation_space)
        self.body = mlp(self.encoder.output_size, hidden_layers, policy_output_size(action_space))
        self.bounded = isinstance(action_space, spaces.Box) and bool(
            np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high)))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.body(self.encoder(observations))

    def decode(self, outputs: np.ndarray) -> np.ndarray:
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            return outputs.argmax(axis=1) + int(space.start)
        if isinstance(space, spaces.MultiDiscrete):
            splits = np.cumsum(space.nvec.reshape(-1))[:-1]
            chosen = [part.argmax(axis=1) for part in np.split(outputs, splits, axis=1)]
            return np.stack(chosen, axis=1).reshape(len(outputs), *space.shape)
        if isinstance(space, spaces.MultiBinary):
            return (outputs > 0).astype(space.dtype).reshape(len(outputs), *space.shape)
        if self.bounded:  # tanh, rescaled to the bounds
            low, high = space.low.reshape(-1), space.high.reshape(-1)
            outputs = low + (np.tanh(outputs) + 1.0) * 0.5 * (high - low)
        return outputs.astype(space.dtype).reshape(len(outputs), *space.shape)


def centered_ranks(returns: np.ndarray) -> np.ndarray:
    """Ranks of all returns scaled to [-0.5, 0.5] (the OpenAI starter's compute_centered_ranks)."""
    flat = returns.reshape(-1)
    ranks = np.empty(flat.size, dtype=np.float64)
    ranks[flat.argsort(kind="stable")] = np.arange(flat.size)
    return (ranks / max(flat.size - 1, 1) - 0.5).reshape(returns.shape)


def perturbation(seed: int, size: int) -> np.ndarray:
    """The noise vector eps of one seed; workers and the learner regenerate it from the seed alone."""
    return np.random.default_rng(seed).standard_normal(size, dtype=np.float32)


def es_gradient(fitness: np.ndarray, seeds: np.ndarray, size: int, sigma: float) -> np.ndarray:
    """g = 1/(2 n sigma) sum_i (F+_i - F-_i) eps_i for `fitness` of shape [n, 2] (plus, minus)."""
    gradient = np.zeros(size, dtype=np.float64)
    for (plus, minus), seed in zip(fitness, seeds):
        gradient += (plus - minus) * perturbation(int(seed), size)
    return gradient / (2 * len(seeds) * sigma)


# --- evaluation of candidates, in worker processes (or in the learner when num_workers is 1) ----------

_WORKER: dict = {}


def _init_worker(env_id: str, observation_space: dict, action_space: dict, hidden_layers: str,
                 in_worker: bool = True) -> None:
    if in_worker:
        torch.set_num_threads(1)  # one core per worker
        # out of the parent's process group: a stop signal sent to the whole group (Ctrl-C of `make run`, a
        # worker's shutdown) must reach the run, which finishes its generation and stops with a final
        # checkpoint, not kill candidates mid-evaluation, which would leave pool.map waiting forever. The
        # pool still ends them (pool.terminate), and they exit on their own if the parent dies.
        os.setpgrp()
    policy = Policy(space_from_json(observation_space), space_from_json(action_space),
                    parse_hidden_layers(hidden_layers))
    _WORKER.update(env=make_env(env_id), policy=policy.requires_grad_(False))


def _rollouts(theta: np.ndarray, obs_mean, obs_std, env_seed: int, episodes: int) -> dict:
    env, policy = _WORKER["env"], _WORKER["policy"]
    nn.utils.vector_to_parameters(torch.from_numpy(theta), policy.parameters())
    returns, lengths, observed = [], [], []
    observation, _ = env.reset(seed=env_seed)
    for _ in range(episodes):
        total, length, done = 0.0, 0, False
        while not done:
            if obs_mean is not None:
                observed.append(np.asarray(observation, dtype=np.float64))
                normalized = np.clip((observation - obs_mean) / obs_std, -10.0, 10.0)
            else:
                normalized = observation
            with torch.no_grad():
                outputs = policy(torch.as_tensor(np.asarray(normalized)[None], dtype=torch.float32)).numpy()
            observation, reward, terminated, truncated, _ = env.step(policy.decode(outputs)[0])
            total += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(length)
        observation, _ = env.reset()
    observations = np.stack(observed).astype(np.float32) if observed else None
    return {"returns": returns, "lengths": lengths, "observations": observations}


def play_generation(pool, tasks: list[tuple], should_stop) -> list[tuple[dict, dict]] | None:
    """Every pair's results in task order, or None as soon as `should_stop` says so (asked between pairs,
    or every 0.1 s while the pool plays them; the caller then terminates the pool mid-generation)."""
    if pool is None:
        results = []
        for task in tasks:
            if should_stop():
                return None
            results.append(_evaluate_pair(task))
        return results
    pending = pool.map_async(_evaluate_pair, tasks)
    while not pending.ready():
        if should_stop():
            return None
        pending.wait(0.1)
    return pending.get()


def _evaluate_pair(task: tuple) -> tuple[dict, dict]:
    """Play theta + sigma eps and theta - sigma eps on the same env seed."""
    theta, seed, sigma, env_seed, episodes, obs_mean, obs_std = task
    eps = perturbation(seed, theta.size)
    plus = _rollouts(theta + sigma * eps, obs_mean, obs_std, env_seed, episodes)
    minus = _rollouts(theta - sigma * eps, obs_mean, obs_std, env_seed, episodes)
    return plus, minus


class EvolutionStrategies(Agent):
    name = "es"

    def build(self) -> None:
        c = self.config
        self.policy = Policy(self.observation_space, self.action_space, parse_hidden_layers(c.hidden_layers))
        self.policy.to(self.device)
        if c.optimizer == "adam":
            self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=c.learning_rate, weight_decay=c.l2_coef)
        else:
            self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=c.learning_rate, weight_decay=c.l2_coef)
        self.modules = {"policy": self.policy}
        self.optimizers = {"optimizer": self.optimizer}
        self.normalize = c.normalize_observations and isinstance(self.observation_space, spaces.Box) \
            and self.observation_space.dtype != np.uint8
        self.obs_stats = RunningMeanStd(self.observation_space.shape) if self.normalize else None
        self.iterations = 0

    def seed_process(self) -> None:
        """Every process of a run on several draws the same perturbation and env seeds (one generator, seeded alike):
        they split each generation's pairs instead."""

    def running_statistics(self) -> list:
        return [self.obs_stats] if self.normalize else []

    def theta(self) -> np.ndarray:
        return nn.utils.parameters_to_vector(self.policy.parameters()).detach().cpu().numpy().astype(np.float32)

    def _frozen_stats(self):
        if not self.normalize:
            return None, None
        return self.obs_stats.mean.copy(), np.sqrt(self.obs_stats.var + 1e-8)

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        mean, std = self._frozen_stats()
        if mean is not None:
            observations = np.clip((observations - mean) / std, -10.0, 10.0)
        with torch.no_grad():
            outputs = self.policy(torch.as_tensor(np.asarray(observations), device=self.device)).cpu().numpy()
        return self.policy.decode(outputs)

    def update(self, fitness: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """One ES step from the pairs' fitness [n, 2]; returns the gradient estimate (ascent direction)."""
        c = self.config
        shaped = centered_ranks(fitness) if c.fitness_shaping == "centered_ranks" else fitness
        gradient = es_gradient(shaped, seeds, self.theta().size, c.sigma)
        # the optimizers minimise: hand them -g (weight decay adds the L2 term, as the starter's -g + l2 theta)
        offset = 0
        for p in self.policy.parameters():
            n = p.numel()
            p.grad = torch.as_tensor(-gradient[offset:offset + n], dtype=p.dtype, device=p.device).view_as(p)
            offset += n
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.iterations += 1
        return gradient

    def train(self, runner) -> None:
        c = self.config
        pairs = c.num_agents // 2
        group = self.group  # on several processes, process r plays pairs r, r + N, r + 2N, ... of each generation
        mine = len(range(group.rank, pairs, group.size))
        workers = min(c.num_workers or max(1, (os.cpu_count() or 1) // group.size), mine)
        init = (self.env_id, space_to_json(self.observation_space), space_to_json(self.action_space),
                c.hidden_layers)
        pool = None
        if workers > 1:
            # spawned, not forked (torch and fork mix badly), and not through a forkserver: the pool counts
            # its workers as dead once a forkserver is gone, which a stop signal to the group would do
            pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=init)
        else:
            _init_worker(*init, in_worker=False)
        try:
            while True:
                theta = self.theta()
                seeds = self.rng.integers(0, 2**31 - 1, size=pairs)
                env_seeds = self.rng.integers(0, 2**31 - 1, size=pairs)
                mean, std = self._frozen_stats()
                tasks = [(theta, int(seed), c.sigma, int(env_seed), c.episodes_per_candidate, mean, std)
                         for seed, env_seed in zip(seeds, env_seeds)]
                results = play_generation(pool, tasks[group.rank::group.size], runner.stop_asked)
                if runner.stop_agreed(results is None):
                    return  # stopped mid-generation: the weights stay those of the last update

                for candidate in (r for pair in results for r in pair):
                    for episode_return, length in zip(candidate["returns"], candidate["lengths"]):
                        runner.episode(episode_return, length)
                    if candidate["observations"] is not None:  # in task order: any worker count (on several
                        self.obs_stats.update(candidate["observations"])  # processes, merged at `record`)
                # every pair's fitness and env steps, in task order, on every process
                played = group.interleaved([(np.mean(plus["returns"]), np.mean(minus["returns"]),
                                             sum(plus["lengths"]) + sum(minus["lengths"])) for plus, minus in results])
                fitness = np.array([[plus, minus] for plus, minus, _ in played])
                steps = sum(steps for _, _, steps in played)
                gradient = self.update(fitness, seeds)
                runner.record({"train/population_return_mean": float(fitness.mean()),
                               "train/population_return_max": float(fitness.max()),
                               "train/population_return_min": float(fitness.min()),
                               "train/gradient_norm": float(np.linalg.norm(gradient)),
                               "train/iteration": self.iterations})
                if not runner.advance(steps):
                    return
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
            _WORKER.clear()

    def extra_state(self) -> dict:
        return {"iterations": self.iterations, "observations": self.obs_stats.state_dict() if self.normalize else None}

    def load_extra_state(self, state: dict) -> None:
        self.iterations = int(state.get("iterations", 0))
        if self.normalize and state.get("observations"):
            self.obs_stats.load_state_dict(state["observations"])


SPEC = AlgorithmSpec(
    name="es",
    family=CLASSIC,
    description="OpenAI-style Evolution Strategies: antithetic perturbations, centred-rank fitness, parallel "
                "workers (Salimans et al. 2017).",
    config_class=ESConfig,
    agent_class=EvolutionStrategies,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary"),
    action_spaces=("Discrete", "Box", "MultiDiscrete", "MultiBinary"),
)
