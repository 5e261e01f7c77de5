import copy

import numpy as np
import pytest
import torch

import trainer
from trainer.algorithms.ppo import ratio_statistics, value_loss
from trainer.events import ListSink

from tests.trainer.policy_gradient_checks import (ACTION_ENVS, OBSERVATION_ENVS, same_seed_gives_identical_metrics,
                                                  trains_saves_loads_and_evaluates)

TINY = dict(num_envs=2, n_steps=16, batch_size=16, n_epochs=2, hidden_layers="16", rnd_hidden_layers="16",
            rnd_output_size=8, pre_normalization_steps=2, pre_normalization_length=4)


@pytest.mark.parametrize("env_id", OBSERVATION_ENVS + ACTION_ENVS)
def test_rnd_ppo_trains_saves_loads_and_evaluates_on_every_space(env_id, tmp_path):
    trains_saves_loads_and_evaluates("rnd-ppo", env_id, TINY, tmp_path, steps=200)


def test_the_same_seed_gives_identical_metrics():
    same_seed_gives_identical_metrics("rnd-ppo", "CartPole-v1", TINY)


def test_the_target_stays_fixed_while_the_predictor_learns_and_novelty_falls():
    agent = trainer.make("rnd-ppo", "MountainCar-v0", seed=0, **TINY)
    target = [p.detach().clone() for p in agent.rnd_target.parameters()]
    untrained = copy.deepcopy(agent.rnd_predictor)
    sink = ListSink()
    agent.learn(600, sink=sink, eval_episodes=0)
    for p, q in zip(agent.rnd_target.parameters(), target):
        torch.testing.assert_close(p.detach(), q)
    # states near the start, which the agent has seen: the trained predictor matches the target better
    observations = torch.tensor([[-0.5, 0.0], [-0.45, 0.005], [-0.55, -0.005]])
    with torch.no_grad():
        trained_error = agent.novelty(observations).mean().item()
        agent.rnd_predictor = untrained
        untrained_error = agent.novelty(observations).mean().item()
    assert trained_error < untrained_error
    values = {key for e in sink.of_kind("train") for key in e["values"]}
    assert {"train/rnd_loss", "train/intrinsic_reward", "train/intrinsic_value_loss"} <= values


def test_warm_up_steps_count_as_env_steps_and_fill_the_observation_statistics():
    agent = trainer.make("rnd-ppo", "MountainCar-v0", seed=0, **{**TINY, "pre_normalization_steps": 3})
    agent.learn(24, eval_episodes=0)  # exactly the warm-up: 3 rounds x 4 vector steps x 2 envs
    assert agent.steps_done == 24
    assert agent.rnd_obs_normalizer.stats.count > 24


def test_intrinsic_returns_flow_across_episode_ends_and_statistics_round_trip(tmp_path):
    agent = trainer.make("rnd-ppo", "rlweb-test/Corridor-box-v0", seed=0, **TINY)
    agent.learn(96, eval_episodes=0)
    loaded = trainer.load(agent.save(tmp_path / "rnd.zip"))
    assert loaded.rnd_obs_normalizer.state_dict() == agent.rnd_obs_normalizer.state_dict()
    assert loaded.intrinsic_scale.state_dict() == agent.intrinsic_scale.state_dict()
    observations = torch.tensor([[0.0], [2.0]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.novelty(observations), agent.novelty(observations))


def test_it_reports_its_statistics_as_means_over_every_minibatch_of_every_epoch(monkeypatch):
    """As PPO and stable-baselines3: 2 epochs of 2 minibatches give 4 values of each statistic."""
    import trainer.algorithms.rnd_ppo as rnd_ppo

    kls, value_losses = [], []

    def recorded_statistics(log_ratio, clip_range):
        approx_kl, clip_fraction = ratio_statistics(log_ratio, clip_range)
        kls.append(float(approx_kl))
        return approx_kl, clip_fraction

    def recorded_value_loss(*args):
        loss = value_loss(*args)
        value_losses.append(float(loss.detach()))
        return loss

    monkeypatch.setattr(rnd_ppo, "ratio_statistics", recorded_statistics)
    monkeypatch.setattr(rnd_ppo, "value_loss", recorded_value_loss)
    sink = ListSink()
    agent = trainer.make("rnd-ppo", "CartPole-v1", seed=0, **{**TINY, "learning_rate": 0.01, "lr_schedule": "constant"})
    agent.learn(16 + 32, sink=sink, eval_episodes=0)  # the warm-up's 16 env steps, then one rollout
    (values,) = [event["values"] for event in sink.of_kind("train")]
    assert len(kls) == 2 * 2 and len(value_losses) == 2 * 2 * 2  # extrinsic and intrinsic values
    assert values["train/approx_kl"] == pytest.approx(np.mean(kls))
    assert values["train/value_loss"] == pytest.approx(np.mean(value_losses[0::2]))
    assert values["train/intrinsic_value_loss"] == pytest.approx(np.mean(value_losses[1::2]))
    assert values["train/approx_kl"] != pytest.approx(np.mean(kls[2:]))


def test_it_trains_in_ppos_epoch_loop_stepping_the_network_and_the_predictor_on_every_minibatch():
    agent = trainer.make("rnd-ppo", "CartPole-v1", seed=0, **TINY)
    agent.learn(16 + 32, eval_episodes=0)  # the warm-up, then one rollout: 2 epochs of 2 minibatches
    assert float(agent.optimizer.state[agent.flat.param]["step"]) == 2 * 2
    assert float(agent.predictor_optimizer.state[agent.predictor_flat.param]["step"]) == 2 * 2
