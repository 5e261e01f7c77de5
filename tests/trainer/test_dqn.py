import numpy as np
import pytest
import torch

import trainer
from trainer.algorithms.dqn import DQN
from trainer.buffers import ReplayBuffer
from trainer.events import ListSink

from tests.trainer import envs_for_tests  # noqa: F401  (registers the corridor envs)

TINY = dict(learning_starts=50, batch_size=16, buffer_size=1000, train_frequency=4, gradient_steps=1,
            hidden_layers="32,32", target_update_interval=20)


def one_transition_buffer(agent, terminated):
    buffer = ReplayBuffer(10, (1,), np.float32, device=agent.device)
    buffer.add(np.array([[0.0]]), np.array([1]), np.array([1.0]), np.array([[1.0]]), np.array([float(terminated)]))
    return buffer


@pytest.mark.parametrize("terminated", [True, False])
def test_td_target_bootstraps_unless_the_state_is_terminal(terminated):
    agent = trainer.make("dqn", "rlweb-test/Corridor-box-v0", seed=0, learning_rate=0.01, delta_clip=0,
                         max_grad_norm=0, gamma=0.5, **{k: v for k, v in TINY.items() if k != "learning_rate"})
    buffer = one_transition_buffer(agent, terminated)
    next_max = agent.target_network(torch.tensor([[1.0]])).max().item()
    for _ in range(2000):
        agent.update(buffer)
    q = agent.q_network(torch.tensor([[0.0]]))[0, 1].item()
    expected = 1.0 if terminated else 1.0 + 0.5 * next_max
    assert q == pytest.approx(expected, abs=1e-3)


def test_truncated_episodes_store_their_real_last_observation_and_are_not_terminal():
    agent = trainer.make("dqn", "rlweb-test/Corridor-box-v0", seed=0, exploration_initial_eps=1.0,
                         exploration_final_eps=1.0, **TINY)
    agent.learn(400)
    buffer = agent.buffer
    n = len(buffer)
    obs, next_obs, terminated = buffer.obs[:n, 0], buffer.next_obs[:n, 0], buffer.terminated[:n]
    # every transition moves one cell (or stays at the wall): no reset observation leaks into next_obs
    assert np.all((np.abs(next_obs - obs) == 1) | ((obs == 0) & (next_obs == 0)))
    assert set(terminated[next_obs == 4].tolist()) == {1.0}  # reaching the goal is terminal
    assert set(terminated[next_obs < 4].tolist()) == {0.0}  # time-limit truncations are not


@pytest.mark.parametrize("kind", ["box", "discrete", "multidiscrete", "multibinary"])
def test_dqn_trains_saves_loads_and_evaluates_on_every_observation_space(kind, tmp_path):
    env_id = f"rlweb-test/Corridor-{kind}-v0"
    agent = trainer.make("dqn", env_id, seed=1, **TINY)
    summary = agent.learn(300, checkpoint_dir=tmp_path, eval_episodes=2)
    assert summary["status"] == "succeeded" and summary["steps"] == 300
    loaded = trainer.load(tmp_path / "final.zip")
    observations = [agent.observation_space.sample() for _ in range(20)]
    assert [int(agent.predict(o)) for o in observations] == [int(loaded.predict(o)) for o in observations]
    assert loaded.steps_done == 300
    assert set(loaded.evaluate(2)) >= {"mean", "std"}


def test_dqn_trains_on_frozen_lake_with_discrete_observations(tmp_path):
    agent = trainer.make("dqn", "FrozenLake-v1", seed=0, **TINY)
    assert agent.learn(300)["steps"] == 300


def test_the_same_seed_gives_identical_metrics():
    def metrics():
        sink = ListSink()
        trainer.make("dqn", "CartPole-v1", seed=3, **TINY).learn(500, sink=sink, eval_episodes=2)
        return [(e["kind"], e["step"], e["values"]) for e in sink.events if e["kind"] not in ("time", "finished")]

    first, second = metrics(), metrics()
    assert first == second
    assert any(kind == "train" for kind, _, _ in first)


def test_target_updates_count_env_steps_across_vector_envs():
    agent = trainer.make("dqn", "CartPole-v1", seed=0, num_envs=3, **{**TINY, "target_update_interval": 30})
    synced = []
    original = agent.update_target
    agent.update_target = lambda: synced.append(agent.steps_done) or original()
    agent.learn(300)
    assert synced == list(range(30, 301, 30))


def test_epsilon_is_reported_and_decays_linearly():
    sink = ListSink()
    trainer.make("dqn", "CartPole-v1", seed=0, exploration_fraction=0.5, exploration_final_eps=0.1,
                 **TINY).learn(1000, sink=sink, log_interval=100)
    epsilons = [e["values"]["train/epsilon"] for e in sink.of_kind("train") if "train/epsilon" in e["values"]]
    assert epsilons == sorted(epsilons, reverse=True)
    assert epsilons[-1] == pytest.approx(0.1)
    assert epsilons[0] > 0.8


def test_a_sink_can_stop_the_run_and_it_ends_cancelled(tmp_path):
    sink = ListSink(stop_after=100)
    summary = trainer.make("dqn", "CartPole-v1", seed=0, **TINY).learn(
        100_000, sink=sink, checkpoint_dir=tmp_path)
    assert summary["status"] == "cancelled"
    # the runner asks the sink every STOP_POLL_SECONDS (0.5 s): a few thousand steps on a fast machine
    assert 100 <= summary["steps"] < 20_000
    assert (tmp_path / "final.zip").exists()
    assert sink.events[-1]["kind"] == "finished" and sink.events[-1]["values"]["status"] == "cancelled"


def test_runner_reports_lifecycle_eval_and_checkpoint_events(tmp_path):
    sink = ListSink()
    trainer.make("dqn", "CartPole-v1", seed=0, **TINY).learn(
        600, sink=sink, eval_interval=200, eval_episodes=2, checkpoint_interval=300, checkpoint_dir=tmp_path)
    kinds = [e["kind"] for e in sink.events]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert [e["step"] for e in sink.of_kind("eval")] == [200, 400, 600]
    tags = [(e["values"]["tag"], e["step"]) for e in sink.of_kind("checkpoint")]
    assert ("periodic", 300) in tags and ("final", 600) in tags and any(t == "best" for t, _ in tags)
    assert {"rollout/episode_return", "rollout/episode_length"} <= set(sink.of_kind("episode")[0]["values"])


def test_a_failure_is_reported_with_its_traceback():
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    agent.targets = lambda batch: 1 / 0  # in every update, whichever strategy runs it
    sink = ListSink()
    with pytest.raises(ZeroDivisionError):
        agent.learn(300, sink=sink)
    failed = sink.of_kind("failed")
    assert failed and "ZeroDivisionError" in failed[0]["values"]["error"]
    assert "Traceback" in failed[0]["values"]["traceback"]


def test_auto_device_picks_what_the_machine_has():
    agent = trainer.make("dqn", "CartPole-v1", device="auto", **TINY)
    assert agent.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert isinstance(agent, DQN)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        trainer.make("dqn", "CartPole-v1", device="cuda", **TINY)


def test_plain_networks_act_through_numpy_views_that_follow_every_update_and_load(tmp_path):
    from trainer.checkpoint import load_checkpoint, save_checkpoint

    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    assert agent.strategy.numpy_q_network is not None
    assert not any(getattr(trainer.make(name, "CartPole-v1", **TINY).strategy, "numpy_q_network", None)
                   for name in ("dueling-dqn", "noisy-dqn", "c51"))
    observations = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)

    def q_values(model):
        with torch.no_grad():
            return model.q_network(torch.as_tensor(observations)).numpy()

    before = q_values(agent)
    np.testing.assert_allclose(agent.strategy.numpy_q_network(observations), before, rtol=1e-5, atol=1e-6)
    agent.learn(300)  # optimizer steps change the weights in place
    assert not np.allclose(q_values(agent), before)
    np.testing.assert_allclose(agent.strategy.numpy_q_network(observations), q_values(agent), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(agent.act(observations, deterministic=True), q_values(agent).argmax(axis=1))
    loaded = load_checkpoint(save_checkpoint(agent, tmp_path / "dqn.safetensors"), device="cpu")
    np.testing.assert_allclose(loaded.strategy.numpy_q_network(observations), q_values(agent), rtol=1e-5, atol=1e-6)
