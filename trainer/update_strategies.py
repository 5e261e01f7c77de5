"""How the DQN family runs its updates and act steps: as written in trainer/algorithms/dqn.py, or through a
faster strategy that computes the same numbers on this machine, chosen once when the agent is built.

`dqn.py` reads as the papers: `DQN.update` samples a batch, works out its TD targets and takes one autograd
step (`DQN.learn_from`); `DQN.greedy_actions` acts through torch. `for_dqn` is the one place that picks
how a training phase's updates and each act step run instead:

- On a GPU, `GraphedDQN`: each update and act step replayed as one CUDA graph (trainer/cuda_graphs.py).
  Measured on an NVIDIA H100 on 2026-11-26 (docs/benchmarks.md): Pong with our dqn preset, 558.3 env
  steps/s against 352.4 with `RLWEB_CUDA_GRAPHS=0` (1.58x); an update 0.92 against 3.77 ms, an act step
  0.13 against 0.50 ms. Prioritized replay stays eager (its priorities go back to the CPU every update).
- On a CPU, for plain Linear/ReLU Q-networks in float32 (`trainer.cpu_speed.hand_paths_apply`), `CPUDQN`
  with three parts, each measured by `python -m benchmarks fast_paths` (whole training runs, DQN's
  CartPole defaults, every part switched off in turn against all on, interleaved; docs/benchmarks.md):
  - hand-written gradients (`trainer.cpu_speed.td_loss_gradients`) in place of autograd's backward pass;
  - shared targets: where the targets do not depend on the phase's earlier updates (no double Q, noise
    or priorities; the target network moves only between phases), the TD targets of all the phase's
    batches in one pass, in chunks of about 512 samples that stay in the CPU's cache;
  - numpy acting (`trainer.cpu_speed.NumpyMLP`): the Q-network run by numpy on views of its weights.
  Shared targets also run for the networks the other two cannot handle (dueling, C51), through autograd.
  On 2026-11-27 (2-core AMD EPYC, shared; 6 rounds, CPU time), all three on against each one off: hand
  gradients 1.24x, shared targets 1.33x, numpy acting 1.20x; all three against none 1.60x: all kept.
- Anywhere else, `PlainDQN`: the agent's own code.

Every strategy gives the plain code's numbers (to float32 rounding): tests/trainer/test_cpu_speed.py,
tests/trainer/test_dqn_family.py and, on a GPU, tests/trainer/test_cuda_graphs.py.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from torch import nn

from trainer import cpu_speed
from trainer.buffers import ReplayBatch, ReplayBuffer
from trainer.cuda_graphs import Graphs


class PlainDQN:
    """The agent's own code: `DQN.update` once per update, `DQN.greedy_actions` to act."""

    def __init__(self, agent):
        self.agent = agent

    def updates(self, buffer: ReplayBuffer, count: int, beta: float = 1.0) -> Iterator[dict]:
        """A training phase: `count` gradient steps, each yielding its metrics."""
        for _ in range(count):
            yield self.agent.update(buffer, beta)

    def greedy(self, observations: np.ndarray) -> np.ndarray:
        return self.agent.greedy_actions(observations)

    def forget(self) -> None:
        """Something an update bakes in changed (a live learning-rate change)."""


class CPUDQN(PlainDQN):
    """The CPU strategy: hand-written gradients, shared targets and numpy acting, each where it applies
    (see the module's docstring)."""

    # at most 16,384 samples or 64 MiB of observations at once: a phase's targets are then worked out
    # within a second, so a cancel is not held up by them
    MOST_SAMPLES, MOST_BYTES = 16_384, 64 * 2**20

    def __init__(self, agent, hand_gradients: bool, shared_targets: bool, numpy_acting: bool):
        super().__init__(agent)
        self.learn_from = self.hand_learn_from if hand_gradients else agent.learn_from
        self.shared_targets = shared_targets
        self.numpy_q_network = cpu_speed.numpy_network(agent.device, agent.q_network.encoder,
                                                       agent.q_network._body) if numpy_acting else None

    def greedy(self, observations: np.ndarray) -> np.ndarray:
        if self.numpy_q_network is not None:
            return self.numpy_q_network(observations).argmax(axis=1)
        return self.agent.greedy_actions(observations)

    def updates(self, buffer: ReplayBuffer, count: int, beta: float = 1.0) -> Iterator[dict]:
        agent, c = self.agent, self.agent.config
        space = agent.observation_space
        samples = count * c.batch_size
        if not self.shared_targets or count <= 1 or samples > self.MOST_SAMPLES \
                or samples * np.prod(space.shape) * space.dtype.itemsize > self.MOST_BYTES:
            for _ in range(count):  # DQN.update, through this strategy's learn_from
                batch = agent.sample(buffer, beta)
                metrics = self.learn_from(batch, agent.targets(batch))
                if c.prioritized_replay:
                    buffer.update_priorities(batch.indices, metrics.pop("priorities"))
                yield metrics
            return
        batches = buffer.batch(buffer.sample_indices(samples, agent.rng), c.n_step_return, c.gamma)
        # in chunks of about 512 samples, whose activations stay in the CPU's cache (twice as fast)
        chunk = max(c.batch_size, 512 // c.batch_size * c.batch_size)
        targets = torch.cat([agent.targets(batches.part(slice(start, start + chunk)))
                             for start in range(0, samples, chunk)])
        for k in range(count):
            rows = slice(k * c.batch_size, (k + 1) * c.batch_size)
            batch = batches._replace(obs=batches.obs[rows], actions=batches.actions[rows])
            yield self.learn_from(batch, targets[rows])

    def hand_learn_from(self, batch, target: torch.Tensor) -> dict:
        """`DQN.learn_from` for a plain Huber or squared-error loss, its gradients worked out by hand."""
        agent, c = self.agent, self.agent.config
        network = agent.q_network
        per_sample, q = cpu_speed.td_loss_gradients(network._body, network.encoder(batch.obs), batch.actions.long(),
                                                    target, batch.weights, c.delta_clip)
        loss = (per_sample * batch.weights).mean() if batch.weights is not None else per_sample.mean()
        if c.max_grad_norm > 0:
            cpu_speed.clip_grad_norm([agent.q_flat], c.max_grad_norm)
        agent.optimizer.step()
        metrics = {"train/loss": loss.detach(), "train/q_mean": q.mean()}
        if c.prioritized_replay:
            metrics["priorities"] = (target - q).abs().cpu().numpy()
        return metrics


class GraphedDQN(PlainDQN):
    """The GPU strategy: each update (target pass, online pass and backward, clipping, Adam) and each
    training act step replayed as one CUDA graph; captured after Adam's first step, and again after a
    live change. A capture that fails turns the graphs off for the run (trainer.cuda_graphs.Graphs)."""

    def __init__(self, agent, graphs: Graphs):
        super().__init__(agent)
        self.graphs = graphs

    def forget(self) -> None:
        self.graphs.clear()  # they hold the old learning rate, clipping norm, ...

    def updates(self, buffer: ReplayBuffer, count: int, beta: float = 1.0) -> Iterator[dict]:
        agent, c = self.agent, self.agent.config
        for _ in range(count):
            # prioritized replay's priorities go back to the CPU: not a graph; and the first step makes
            # Adam's state, which a graph then finds in place
            if c.prioritized_replay or not self.graphs.enabled or not any(agent.optimizer.state.values()):
                yield agent.update(buffer, beta)
                continue
            batch = agent.sample(buffer, beta)
            tensors = [batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated, batch.discounts]
            yield self.graphs.call("update", self.update_on, tensors, restore=self.trained_tensors)

    def update_on(self, obs, actions, rewards, next_obs, terminated, discounts) -> dict[str, torch.Tensor]:
        batch = ReplayBatch(obs, actions, rewards, next_obs, terminated, discounts)
        return self.agent.learn_from(batch, self.agent.targets(batch))

    def trained_tensors(self) -> list[torch.Tensor]:
        """What an update changes: the Q-network's weights and Adam's state."""
        agent = self.agent
        return [agent.q_flat.param, *(value for state in agent.optimizer.state.values() for value in state.values()
                                      if isinstance(value, torch.Tensor))]

    def greedy(self, observations: np.ndarray) -> np.ndarray:
        agent = self.agent
        if not (self.graphs.enabled and agent.q_network.training):  # evaluation acts on the mean weights, eagerly
            return agent.greedy_actions(observations)
        observations = torch.as_tensor(observations, device=agent.device)
        return self.graphs.call("act", self.greedy_on, [observations]).cpu().numpy()

    def greedy_on(self, observations: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.agent.q_values(self.agent.q_network, observations).argmax(dim=1)


def for_dqn(agent, hand_gradients: bool = True, shared_targets: bool = True,
            numpy_acting: bool = True) -> PlainDQN:
    """The one place that picks how a DQN agent runs its updates and act steps (its device, its network,
    its options). The switches turn the CPU strategy's parts off (for the benchmark)."""
    c = agent.config
    graphs = Graphs(agent.device)
    if graphs.enabled:
        return GraphedDQN(agent, graphs)
    if agent.device.type != "cpu":
        return PlainDQN(agent)
    plain_network = cpu_speed.hand_paths_apply(agent.device, torch.float32,
                                               [agent.q_network.encoder, *agent.q_network._body],
                                               activations=(nn.ReLU,))
    # (dueling and C51 heads are not a plain stack of layers)
    plain_network = plain_network and not (c.dueling or c.categorical)
    hand_gradients, numpy_acting = hand_gradients and plain_network, numpy_acting and plain_network
    # the targets of a phase's batches stay as they were through the phase's updates
    shared_targets = shared_targets and not (c.double_q or c.noisy or c.prioritized_replay)
    if not (hand_gradients or shared_targets or numpy_acting):
        return PlainDQN(agent)
    return CPUDQN(agent, hand_gradients, shared_targets, numpy_acting)
