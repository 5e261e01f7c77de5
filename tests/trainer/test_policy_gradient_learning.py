"""Learning checks for the policy-gradient algorithms (docs/algorithms.md, section 1b); each stops at the
first evaluation that reaches its threshold. The full figures (3 seeds, Pendulum, speed against SB3)
are in benchmarks/policy_gradient.py."""

import pytest

import trainer

from benchmarks.policy_gradient import SPARSE, SPARSE_ENV  # noqa: F401  (registers the sparse MountainCar)
from tests.trainer.stop_when_solved import StopWhenSolved


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, budget", [("ppo", 60_000), ("a2c", 150_000), ("vpg", 100_000),
                                               ("reinforce", 100_000)])
def test_it_solves_cartpole_with_its_default_settings(algorithm, budget):
    sink = StopWhenSolved(475.0)
    summary = trainer.make(algorithm, "CartPole-v1", seed=0).learn(budget, sink=sink, eval_interval=5_000,
                                                                    eval_episodes=10)
    print(f"{algorithm}: best eval {sink.best} after {summary['steps']} env steps")
    assert sink.best >= 475.0


@pytest.mark.slow
def test_rnd_finds_the_flag_of_a_sparse_mountain_car_where_plain_ppo_does_not():
    # reward 1 at the flag, 0 elsewhere; the same PPO settings for both
    successes = {}
    for algorithm in ("rnd-ppo", "ppo"):
        sink = StopWhenSolved(1.0)
        summary = trainer.make(algorithm, SPARSE_ENV, seed=0, **SPARSE).learn(30_000, sink=sink, eval_interval=10_000,
                                                                               eval_episodes=5)
        successes[algorithm] = (sink.best, summary["steps"])
    print(f"best eval success rate within 30k env steps: {successes}")
    assert successes["rnd-ppo"][0] > 0 and successes["ppo"][0] == 0, successes
