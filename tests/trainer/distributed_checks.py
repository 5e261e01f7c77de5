"""What each process of a two-process run checks, launched once by test_distributed.py (a launch costs seconds).

Every check compares the two processes' update with the update one process makes on the whole batch (both
processes' data side by side), computed here in each process by an agent of its own that trains alone; or trains a
few hundred steps with DistributedRunner and reports the weights and statistics, which the test compares between the
processes. `process_checks` returns plain numbers and arrays.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.distributed as dist

import trainer
from trainer.buffers import Episode
from trainer.distributed import DistributedRunner, Group, ProcessGroup, snapshot, use_group
from trainer.events import ListSink
from trainer.normalization import RunningMeanStd

ENV_ID = "CartPole-v1"
STEPS = 8  # rollout steps of the synthetic rollouts
ENVS_EACH = 2  # envs per process in them


def alone(algorithm: str, **hyperparameters):
    """An agent that trains in this process only (the comparison), made as every process's own agent is."""
    use_group(Group())
    try:
        return trainer.make(algorithm, ENV_ID, seed=5, device="cpu", preset=None, **hyperparameters)
    finally:
        use_group(GROUP)


def together(algorithm: str, **hyperparameters):
    """This process's agent of the two-process run, seeded as the launcher seeds it."""
    agent = trainer.make(algorithm, ENV_ID, seed=5, device="cpu", preset=None, processes=2, **hyperparameters)
    agent.seed_process()
    return agent


def rollout(rank: int) -> dict:
    """Synthetic CartPole data of one process's envs: observations, actions, rewards, ends, the observations after."""
    rng = np.random.default_rng(100 + rank)
    shape = (STEPS, ENVS_EACH)
    return {"obs": rng.normal(size=(*shape, 4)).astype(np.float32), "actions": rng.integers(0, 2, size=shape),
            "rewards": rng.normal(size=shape).astype(np.float32), "terminated": rng.random(shape) < 0.1,
            "truncated": rng.random(shape) < 0.1, "last_obs": rng.normal(size=(ENVS_EACH, 4)).astype(np.float32)}


def side_by_side(parts: list[dict]) -> dict:
    """Both processes' rollouts as one rollout of all their envs (process 0's envs first)."""
    return {key: np.concatenate([part[key] for part in parts], axis=1 if key != "last_obs" else 0) for key in parts[0]}


def fill(agent, data: dict, n_step_returns: bool = False):
    """A rollout buffer of `data`, with the agent's values and advantages (GAE, or A2C's n-step returns)."""
    num_envs = data["actions"].shape[1]
    buffer = agent.new_buffer(STEPS, num_envs)
    for t in range(STEPS):
        buffer.add(data["obs"][t], data["actions"][t], data["rewards"][t], data["terminated"][t], data["truncated"][t])
    with torch.no_grad():
        everything = buffer.everything()
        distribution, values = agent.network(everything.obs)
        buffer.set_values(distribution.log_prob(everything.actions).numpy(), values.numpy())
        last = agent.network.values(torch.as_tensor(data["last_obs"]))[:, 0].numpy()
    if n_step_returns:
        buffer.compute_n_step_returns(last, agent.config.gamma)
    else:
        buffer.compute_advantages(last, agent.config.gamma, agent.config.gae_lambda)
    return buffer


class Orders:
    """The minibatch orders of the one-process update that match the processes': its k-th minibatch is every
    process's k-th, each process's rows taken to where its envs sit in the side-by-side rollout."""

    def __init__(self, orders_by_rank: list[list[np.ndarray]], batch_each: int):
        self.orders = []
        size_each = STEPS * ENVS_EACH
        for epoch in range(len(orders_by_rank[0])):
            order = []
            for start in range(0, size_each, batch_each):
                for rank, orders in enumerate(orders_by_rank):
                    local = orders[epoch][start:start + batch_each]
                    step, env = local // ENVS_EACH, local % ENVS_EACH
                    order.extend(step * ENVS_EACH * len(orders_by_rank) + rank * ENVS_EACH + env)
            self.orders.append(np.array(order))

    def permutation(self, size: int) -> np.ndarray:
        return self.orders.pop(0)


def flat_weights(agent) -> np.ndarray:
    return np.concatenate([tensor.detach().reshape(-1).numpy() for module in agent.modules.values()
                           for tensor in module.state_dict().values()])


def ppo_update() -> dict:
    """PPO: two epochs of two minibatches, advantages normalised per minibatch, KL early stop, gradients clipped."""
    settings = dict(n_steps=STEPS, n_epochs=2, normalize_advantage=True, target_kl=0.05, max_grad_norm=0.5,
                    learning_rate=0.01)
    mine = together("ppo", num_envs=2 * ENVS_EACH, batch_size=STEPS * ENVS_EACH, **settings)
    reference = alone("ppo", num_envs=2 * ENVS_EACH, batch_size=STEPS * ENVS_EACH, **settings)
    parts = [rollout(rank) for rank in range(2)]
    # the processes' coming minibatch orders, known to both, become the one-process update's
    upcoming = copy.deepcopy(mine.rng)
    orders = GROUP.interleaved([[upcoming.permutation(STEPS * ENVS_EACH) for _ in range(2)]])
    reference.rng = Orders(orders, STEPS * ENVS_EACH // 2)
    mine_metrics = mine.update(fill(mine, parts[GROUP.rank]), 0.0)
    reference.update(fill(reference, side_by_side(parts)), 0.0)
    return {"weights": flat_weights(mine), "reference": flat_weights(reference),
            "gradient": mine.flat.param.grad.numpy().copy(), "reference_gradient": reference.flat.param.grad.numpy(),
            "approx_kl": mine_metrics["train/approx_kl"]}


def a2c_update() -> dict:
    settings = dict(n_steps=STEPS, normalize_advantage=True, num_envs=2 * ENVS_EACH, policy_learning_rate=0.01)
    mine, reference = together("a2c", **settings), alone("a2c", **settings)
    parts = [rollout(rank) for rank in range(2)]
    mine.update(fill(mine, parts[GROUP.rank], n_step_returns=True), 0.0)
    reference.update(fill(reference, side_by_side(parts), n_step_returns=True), 0.0)
    return {"weights": flat_weights(mine), "reference": flat_weights(reference)}


def episodes(rank: int) -> list[Episode]:
    """Whole episodes of different lengths (process 1 has more steps than process 0), one cut by a time limit."""
    rng = np.random.default_rng(200 + rank)
    lengths = [3, 9] if rank == 0 else [5, 7, 11]
    return [Episode(obs=rng.normal(size=(length, 4)).astype(np.float32), actions=rng.integers(0, 2, size=length),
                    rewards=rng.normal(size=length).astype(np.float32), terminated=index != 1,
                    final_obs=rng.normal(size=4).astype(np.float32)) for index, length in enumerate(lengths)]


def vpg_update(baseline: str) -> dict:
    settings = dict(num_envs=2, baseline=baseline, normalize_batch_returns=True, value_steps=3)
    mine, reference = together("vpg", **settings), alone("vpg", **settings)
    mine.update(episodes(GROUP.rank))
    reference.update(episodes(0) + episodes(1))
    return {"weights": flat_weights(mine), "reference": flat_weights(reference)}


def reinforce_update() -> dict:
    settings = dict(num_envs=2, normalize_batch_returns=True)
    mine, reference = together("reinforce", **settings), alone("reinforce", **settings)
    mine.update(episodes(GROUP.rank))
    reference.update(episodes(0) + episodes(1))
    return {"weights": flat_weights(mine), "reference": flat_weights(reference)}


def merged_statistics() -> dict:
    """RunningMeanStd merged from both processes' samples against all the samples taken by one."""
    rng = np.random.default_rng(7)
    base = rng.normal(3.0, 2.0, size=(50, 3))
    new = [rng.normal(3.5, 1.0, size=(20, 3)), rng.normal(-1.0, 4.0, size=(70, 3))]
    stats, everything = RunningMeanStd((3,)), RunningMeanStd((3,))
    stats.update(base)
    bases = [snapshot(stats)]
    stats.update(new[GROUP.rank])
    GROUP.merge_statistics([stats], bases)
    for batch in (base, *new):
        everything.update(batch)
    return {"merged": np.concatenate([stats.mean, stats.var, [stats.count]]),
            "reference": np.concatenate([everything.mean, everything.var, [everything.count]])}


def minibatch_statistics() -> dict:
    values = torch.as_tensor(np.random.default_rng(300 + GROUP.rank).normal(size=10).astype(np.float32))
    found = GROUP.minibatch_statistics(values, 4)
    everything = torch.cat(GROUP.interleaved([values]))  # both processes' values
    expected = []
    for start in range(0, 10, 4):
        part = torch.cat([everything[:10][start:start + 4], everything[10:][start:start + 4]])
        expected.append((float(part.mean()), float(part.std()), len(part)))
    return {"found": [(float(mean), float(std), size) for mean, std, size in found], "expected": expected}


def train(algorithm: str, steps: int, **hyperparameters) -> dict:
    """A short run of this process's part, with DistributedRunner: its weights, statistics and events."""
    agent = together(algorithm, **hyperparameters)
    sink = ListSink()
    summary = DistributedRunner(agent, GROUP, sink=sink, end_step=steps, eval_episodes=0).run()
    statistics = [np.concatenate([np.ravel(s.mean), np.ravel(s.var), [s.count]]) for s in agent.running_statistics()]
    return {"weights": flat_weights(agent), "statistics": statistics, "summary": summary,
            "episode_steps": sum(event["values"]["rollout/episode_length"] for event in sink.of_kind("episode"))}


def es_generations() -> dict:
    """Two ES generations on two processes (each plays half the pairs) against one process playing them all."""
    settings = dict(num_agents=6, hidden_layers="8", num_workers=1)
    mine = together("es", **settings)
    reference = alone("es", **settings)
    DistributedRunner(mine, GROUP, sink=ListSink(), end_step=300, eval_episodes=0).run()
    reference.learn(300, eval_episodes=0)
    return {"weights": flat_weights(mine), "reference": flat_weights(reference), "steps": mine.steps_done,
            "reference_steps": reference.steps_done}


GROUP: ProcessGroup | None = None


def process_checks() -> dict:
    global GROUP
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        GROUP = ProcessGroup(torch.device("cpu"), "gloo")
        use_group(GROUP)
        torch.manual_seed(0)
        return {
            "rank": GROUP.rank,
            "ppo_update": ppo_update(),
            "a2c_update": a2c_update(),
            "vpg_update": vpg_update("value"),
            "vpg_mean_baseline_update": vpg_update("mean"),
            "reinforce_update": reinforce_update(),
            "merged_statistics": merged_statistics(),
            "minibatch_statistics": minibatch_statistics(),
            # 100 updates, every statistic normalised: the weights and statistics must stay the same everywhere
            "ppo_100_updates": train("ppo", 800, num_envs=2, n_steps=4, batch_size=4, n_epochs=2,
                                     normalize_observations=True, normalize_rewards=True),
            "a2c": train("a2c", 400, num_envs=4, n_steps=5, normalize_observations=True),
            "vpg": train("vpg", 600, num_envs=2, episodes_per_batch=3),
            "rnd_ppo": train("rnd-ppo", 512, num_envs=2, n_steps=32, batch_size=16, n_epochs=1,
                             pre_normalization_steps=1, pre_normalization_length=8),
            "es": es_generations(),
            "es_normalized": train("es", 400, num_agents=4, hidden_layers="8", num_workers=1,
                                   normalize_observations=True),
        }
    finally:
        use_group(Group())
        dist.destroy_process_group()
