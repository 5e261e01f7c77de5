"""Learning checks: a small budget reaches a known score (docs/algorithms.md, section 1)."""

import pytest

import trainer


@pytest.mark.slow
def test_dqn_with_tuned_settings_solves_cartpole_within_50k_steps_on_two_of_three_seeds():
    # rl-baselines3-zoo's tuned CartPole-v1 settings are DQN's defaults
    best = []
    for seed in range(3):
        summary = trainer.make("dqn", "CartPole-v1", seed=seed).learn(50_000, eval_interval=5_000, eval_episodes=10)
        best.append(summary["best_eval_return"])
        print(f"seed {seed}: best eval return {summary['best_eval_return']}, final {summary['eval_return_mean']}")
    assert sum(score >= 475 for score in best) >= 2, best
