"""On a GPU the DQN family updates and acts through CUDA graphs (trainer/cuda_graphs.py): the same numbers as
the plain PyTorch calls, before and after a live change of what a graph bakes in. The GPU tests run on a
machine with CUDA (the device machine); here only the switches are checked."""

import numpy as np
import pytest
import torch

import trainer
from trainer import update_strategies
from trainer.cuda_graphs import Graphs

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device machine)")
SMALL = dict(learning_starts=64, batch_size=32, buffer_size=2_000, hidden_layers="64,64", train_frequency=4,
             gradient_steps=1, max_grad_norm=1.0)


def test_graphs_are_only_for_cuda_and_can_be_turned_off(monkeypatch):
    assert not Graphs(torch.device("cpu")).enabled
    calls = []
    assert Graphs(torch.device("cpu")).call("f", lambda x: calls.append(x) or 7, [torch.zeros(1)]) == 7 and calls
    monkeypatch.setenv("RLWEB_CUDA_GRAPHS", "0")
    assert not Graphs(torch.device("cuda")).enabled


def filled_agents(algorithm: str, **settings):
    """Two agents with the same seed and replay, one with graphs and one without."""
    agents = []
    for graphs in (True, False):
        agent = trainer.make(algorithm, "CartPole-v1", seed=0, device="cuda", **{**SMALL, **settings})
        assert isinstance(agent.strategy, update_strategies.GraphedDQN)  # chosen when the agent is built
        if not graphs:
            agent.strategy = update_strategies.PlainDQN(agent)  # dqn.py's own code
        agent.buffer = agent.make_buffer()
        rng = np.random.default_rng(1)
        for _ in range(500):
            agent.buffer.add(rng.standard_normal((1, 4)).astype(np.float32), rng.integers(0, 2, 1),
                             rng.standard_normal(1).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32),
                             rng.random(1) < 0.05, rng.random(1) < 0.01)
        agents.append(agent)
    return agents


def assert_same(graphed, plain, updates: int):
    for _ in range(updates):
        ours, theirs = [next(iter(agent.strategy.updates(agent.buffer, 1))) for agent in (graphed, plain)]
        torch.testing.assert_close(ours["train/loss"], theirs["train/loss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(graphed.q_flat.param, plain.q_flat.param, rtol=1e-5, atol=1e-6)
    observations = np.random.default_rng(2).standard_normal((1, 4)).astype(np.float32)
    assert graphed.strategy.greedy(observations).tolist() == plain.strategy.greedy(observations).tolist()


@needs_cuda
@pytest.mark.parametrize("algorithm, settings", [("dqn", {}), ("double-dqn", {}), ("dueling-dqn", {}),
                                                 ("c51", {"v_min": -5.0, "v_max": 5.0}), ("nstep-dqn", {})])
def test_graphed_updates_and_actions_equal_the_plain_ones_before_and_after_a_live_change(algorithm, settings):
    graphed, plain = filled_agents(algorithm, **settings)
    assert_same(graphed, plain, 20)
    assert any(key[0] == "update" for key in graphed.strategy.graphs.graphs), "the updates did not go through a graph"
    for agent in (graphed, plain):
        agent.apply_live_changes({"learning_rate": 1e-2, "max_grad_norm": 0.5})
    assert not graphed.strategy.graphs.graphs  # the old ones held the old learning rate
    assert_same(graphed, plain, 20)
    for agent in (graphed, plain):
        agent.update_target()
    assert_same(graphed, plain, 5)


@needs_cuda
def test_a_dqn_run_on_the_gpu_trains_through_graphs_and_reports_its_losses():
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cuda", **SMALL)
    from trainer.events import ListSink
    sink = ListSink()
    summary = agent.learn(2_000, sink=sink, eval_episodes=2, log_interval=500)
    assert summary["status"] == "succeeded" and agent.strategy.graphs.graphs
    losses = [event["values"]["train/loss"] for event in sink.of_kind("train") if "train/loss" in event["values"]]
    assert len(losses) >= 3 and all(np.isfinite(losses))


class PassThroughGraphs(Graphs):
    """Graphs that run the function as it is (no CUDA here), recording what went through them: the graphed
    strategy's own bookkeeping, checked on a CPU."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.enabled, self.calls = True, []

    def call(self, name, function, inputs, restore=list):
        self.calls.append(name)
        assert all(isinstance(tensor, torch.Tensor) for tensor in [*inputs, *restore()])
        return function(*inputs)


@pytest.mark.parametrize("algorithm", ["dqn", "noisy-dqn", "per-dqn"])
def test_the_graphed_strategy_takes_the_plain_codes_steps_through_its_graphs(algorithm):
    graphed, plain = (trainer.make(algorithm, "CartPole-v1", seed=0, device="cpu", **SMALL) for _ in range(2))
    graphed.strategy = update_strategies.GraphedDQN(graphed, PassThroughGraphs())
    plain.strategy = update_strategies.PlainDQN(plain)
    rng = np.random.default_rng(1)
    for _ in range(300):
        transition = (rng.standard_normal((1, 4)).astype(np.float32), rng.integers(0, 2, 1),
                      rng.standard_normal(1).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32),
                      rng.random(1) < 0.05, rng.random(1) < 0.01)
        for agent in (graphed, plain):
            if not hasattr(agent, "buffer"):
                agent.buffer = agent.make_buffer()
            agent.buffer.add(*transition)
    for step in range(5):
        metrics = []
        for agent in (graphed, plain):
            torch.manual_seed(step)  # the same noise for both (noisy nets draw from torch's generator)
            metrics.append(next(iter(agent.strategy.updates(agent.buffer, 1, beta=0.5))))
        assert float(metrics[0]["train/loss"]) == float(metrics[1]["train/loss"])
    assert torch.equal(graphed.q_flat.param, plain.q_flat.param)
    observations = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    assert graphed.strategy.greedy(observations).tolist() == plain.strategy.greedy(observations).tolist()
    calls = graphed.strategy.graphs.calls
    # the first update makes Adam's state eagerly; prioritized replay's updates stay eager
    assert calls.count("update") == (0 if algorithm == "per-dqn" else 4) and calls.count("act") == 1
