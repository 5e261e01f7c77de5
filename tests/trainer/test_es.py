"""Evolution Strategies: the gradient estimate, fitness shaping, the update, parallel workers."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import trainer
from trainer.algorithms.es import centered_ranks, es_gradient, perturbation
from trainer.events import ListSink


def quadratic(theta, optimum):
    return -float(np.sum((theta - optimum) ** 2))


def test_the_antithetic_gradient_estimate_matches_finite_differences_on_a_quadratic():
    rng = np.random.default_rng(0)
    theta, optimum, sigma = rng.standard_normal(5), rng.standard_normal(5), 0.1
    seeds = np.arange(4000)
    fitness = np.array([[quadratic(theta + sigma * perturbation(s, 5), optimum),
                         quadratic(theta - sigma * perturbation(s, 5), optimum)] for s in seeds])
    estimate = es_gradient(fitness, seeds, 5, sigma)
    step = 1e-5
    finite = np.array([(quadratic(theta + step * e, optimum) - quadratic(theta - step * e, optimum)) / (2 * step)
                       for e in np.eye(5)])
    assert np.allclose(estimate, finite, atol=0.1 * np.linalg.norm(finite))
    assert estimate @ finite / (np.linalg.norm(estimate) * np.linalg.norm(finite)) > 0.99


def test_centered_ranks_span_minus_half_to_half_in_the_order_of_the_returns():
    ranks = centered_ranks(np.array([[10.0, -3.0], [7.0, 100.0]]))
    assert np.allclose(ranks, [[1 / 6, -0.5], [-1 / 6, 0.5]])


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_update_increases_fitness_on_a_quadratic(optimizer):
    agent = trainer.make("es", "CartPole-v1", seed=0, hidden_layers="", sigma=0.05, learning_rate=0.05,
                         optimizer=optimizer, l2_coef=0.0, num_agents=40)
    optimum = np.linspace(-1, 1, agent.theta().size)
    start = quadratic(agent.theta(), optimum)
    for _ in range(30):
        theta, seeds = agent.theta(), agent.rng.integers(0, 2**31 - 1, size=20)
        fitness = np.array([[quadratic(theta + 0.05 * perturbation(s, theta.size), optimum),
                             quadratic(theta - 0.05 * perturbation(s, theta.size), optimum)] for s in seeds])
        agent.update(fitness, seeds)
    assert quadratic(agent.theta(), optimum) > start + 0.5 * abs(start)


def test_num_agents_must_be_even():
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("es", "CartPole-v1", {"num_agents": 7})
    assert "antithetic" in error.value.errors["num_agents"]


def test_it_trains_reports_the_population_saves_loads_and_evaluates(tmp_path):
    sink = ListSink()
    agent = trainer.make("es", "CartPole-v1", seed=0, num_agents=6, num_workers=1, hidden_layers="8",
                         normalize_observations=True)
    summary = agent.learn(500, sink=sink, checkpoint_dir=tmp_path, eval_episodes=1)
    assert summary["status"] == "succeeded" and summary["steps"] >= 500
    train = [e["values"] for e in sink.of_kind("train")]
    assert all(v["train/population_return_max"] >= v["train/population_return_mean"] for v in train)
    assert len(sink.of_kind("episode")) == 6 * agent.iterations
    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.extra_state() == agent.extra_state() and loaded.obs_stats.count > 100
    observations = np.stack([agent.observation_space.sample() for _ in range(20)])
    assert np.array_equal(agent.act(observations, True), loaded.act(observations, True))
    assert loaded.evaluate(1)["mean"] > 0


def test_worker_processes_give_the_same_run_as_the_learner_alone():
    def metrics(workers):
        sink = ListSink()
        trainer.make("es", "CartPole-v1", seed=2, num_agents=4, num_workers=workers, hidden_layers="8").learn(
            300, sink=sink, eval_episodes=1)
        return [(e["kind"], e["step"], e["values"]) for e in sink.events
                if e["kind"] not in ("started", "time", "finished")]

    alone = metrics(1)
    assert alone == metrics(1)  # the same seed gives identical metrics
    assert alone == metrics(2)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "FrozenLake-v1"])
def test_it_works_with_box_actions_and_discrete_observations(env_id):
    agent = trainer.make("es", env_id, seed=0, num_agents=2, num_workers=1, hidden_layers="4")
    assert agent.learn(100, eval_episodes=0)["steps"] >= 100
    action = agent.predict(agent.observation_space.sample())
    assert agent.action_space.contains(np.asarray(action, dtype=agent.action_space.dtype))


STOPPED_BY_A_SIGNAL = """
import signal, sys
import trainer
from trainer.events import Sink

class StopOnSigterm(Sink):  # as the Celery task does (rlweb.experiments.tasks.stop_on_sigterm)
    stop = False
    trained = False
    def should_stop(self):
        return self.stop
    def emit(self, event):
        if event["kind"] in ("started", "finished"):
            print(event["kind"], event["values"].get("status", ""), flush=True)
        elif event["step"] > 0 and not self.trained:  # a generation is done: there are weights worth saving
            self.trained = True
            print("trained", flush=True)

if __name__ == "__main__":
    sink = StopOnSigterm()
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(sink, "stop", True))
    agent = trainer.make("es", "CartPole-v1", seed=0, num_workers=2)
    agent.learn(10_000_000, sink=sink, checkpoint_dir=sys.argv[1], eval_episodes=0)
"""


@pytest.mark.slow
def test_a_stop_signal_to_the_whole_process_group_ends_the_run_cancelled_with_a_final_checkpoint(tmp_path):
    """Ctrl-C of `make run` and a worker's shutdown send SIGTERM to the worker's whole process group. The
    candidates' processes stay out of it: the run finishes its generation, saves and ends cancelled (a
    killed candidate used to leave pool.map waiting forever), and no process is left behind."""
    script = tmp_path / "stopped_by_a_signal.py"
    script.write_text(STOPPED_BY_A_SIGNAL)
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True,
                               start_new_session=True, cwd=os.getcwd())
    try:
        assert process.stdout.readline().strip() == "started"
        # after a first generation (a run stopped before it trained saves nothing), while the workers evaluate
        # the next one's candidates
        assert process.stdout.readline().strip() == "trained"
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) >= 2  # the two candidate workers (and multiprocessing's resource tracker)
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0 and output.strip() == "finished cancelled"
    assert (tmp_path / "final.zip").exists()
    deadline = time.monotonic() + 10  # the pool's workers, in groups of their own, are ended too

    def running(pid: str) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    while left := [pid for pid in children if running(pid)]:
        assert time.monotonic() < deadline, f"left running: {left}"
        time.sleep(0.2)
