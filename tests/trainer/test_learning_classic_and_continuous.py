"""Learning checks for issue 5's algorithms, small enough for CI (bigger targets: benchmarks/continuous.py)."""

import gymnasium as gym
import pytest

import trainer


@pytest.mark.slow
@pytest.mark.learning
def test_sac_swings_pendulum_up_within_4k_steps():
    agent = trainer.make("sac", "Pendulum-v1", seed=0, hidden_layers="64,64")
    summary = agent.learn(4_000, eval_episodes=5)
    assert summary["eval_return_mean"] > -400, summary


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.parametrize("algorithm, steps", [("ddpg", 5_000), ("td3", 9_000)])
def test_ddpg_and_td3_swing_pendulum_up(algorithm, steps):
    """Seeds 0, 1 and 2 all pass -200 by 4k (ddpg) and 8k (td3) steps with these small networks."""
    agent = trainer.make(algorithm, "Pendulum-v1", seed=0, hidden_layers="64,64", learning_starts=1_000)
    summary = agent.learn(steps, eval_interval=1_000, eval_episodes=10)
    assert summary["best_eval_return"] >= -200, summary


@pytest.mark.slow
def test_qlearning_solves_non_slippery_frozen_lake():
    env_id = "rlweb-test/FrozenLake-deterministic-v1"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point="gymnasium.envs.toy_text:FrozenLakeEnv", kwargs={"is_slippery": False},
                     max_episode_steps=100)
    agent = trainer.make("qlearning", env_id, seed=0, exploration_decay=0.999)
    assert agent.learn(10_000, eval_episodes=10)["eval_return_mean"] == 1.0


@pytest.mark.slow
@pytest.mark.learning
def test_es_balances_cartpole_for_200_steps_within_60k_steps():
    agent = trainer.make("es", "CartPole-v1", seed=0, num_workers=2)
    summary = agent.learn(60_000, eval_episodes=5, eval_interval=20_000)
    assert summary["best_eval_return"] >= 200, summary
