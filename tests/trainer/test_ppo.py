import numpy as np
import pytest
import torch

import trainer
from trainer.algorithms.ppo import PPOConfig, clipped_surrogate_loss, ratio_statistics, value_loss
from trainer.events import ListSink
from trainer.params import ConfigError, build_config

from tests.trainer.policy_gradient_checks import (ACTION_ENVS, OBSERVATION_ENVS, same_seed_gives_identical_metrics,
                                                  trains_saves_loads_and_evaluates)

TINY = dict(num_envs=2, n_steps=16, batch_size=8, n_epochs=2, hidden_layers="16")


def test_clipped_surrogate_on_hand_made_numbers():
    # ratios 1.5, 0.5, 1.1, 0.7 with advantages +1, +1, -2, -2 and epsilon 0.2
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.7]))
    advantages = torch.tensor([1.0, 1.0, -2.0, -2.0])
    loss, log_ratio = clipped_surrogate_loss(new, old, advantages, 0.2)
    # min(r A, clip(r) A): 1.2 (clipped), 0.5 (unclipped is smaller), -2.2 (unclipped), -1.6 (clipped)
    assert loss.item() == pytest.approx(-(1.2 + 0.5 - 2.2 - 1.6) / 4)
    approx_kl, clip_fraction = ratio_statistics(log_ratio, 0.2)
    assert clip_fraction.item() == pytest.approx(0.75)  # 1.5, 0.5 and 0.7 lie outside [0.8, 1.2]
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7])
    assert approx_kl.item() == pytest.approx(((ratio - 1) - ratio.log()).mean().item())


def test_clipped_surrogate_gradient_is_zero_where_the_ratio_is_clipped():
    new = torch.log(torch.tensor([1.5, 0.9])).requires_grad_()
    loss, _ = clipped_surrogate_loss(new, torch.zeros(2), torch.tensor([1.0, 1.0]), 0.2)
    loss.backward()
    assert new.grad[0] == 0 and new.grad[1] != 0


def test_value_clipping_on_hand_made_numbers():
    values = torch.tensor([2.0, 0.0])
    old_values = torch.tensor([1.0, 1.0])
    returns = torch.tensor([3.0, -1.0])
    assert value_loss(values, old_values, returns, None).item() == pytest.approx((1 + 1) / 2)
    # clipped values 1.5 and 0.5: squared errors 2.25 and 2.25, larger than the unclipped 1 and 1
    assert value_loss(values, old_values, returns, 0.5).item() == pytest.approx(2.25)
    # the max keeps the unclipped error when it is the larger one
    assert value_loss(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([1.2]), 0.5).item() == \
        pytest.approx(0.8 ** 2)


def test_defaults_are_the_zoo_cartpole_settings():
    config = build_config(PPOConfig, {})
    assert (config.num_envs, config.n_steps, config.batch_size, config.n_epochs) == (8, 32, 256, 20)
    assert (config.gamma, config.gae_lambda, config.entropy_coef, config.learning_rate) == (0.98, 0.8, 0.0, 1e-3)
    assert config.lr_schedule == config.clip_schedule == "linear"


def test_it_refuses_a_batch_larger_than_a_rollout():
    with pytest.raises(ConfigError, match="batch_size"):
        trainer.validate("ppo", "CartPole-v1", {"num_envs": 2, "n_steps": 4, "batch_size": 16})


@pytest.mark.parametrize("env_id", OBSERVATION_ENVS + ACTION_ENVS)
def test_ppo_trains_saves_loads_and_evaluates_on_every_space(env_id, tmp_path):
    trains_saves_loads_and_evaluates("ppo", env_id, TINY, tmp_path)


def test_ppo_trains_on_pendulum_with_normalisation_and_value_clipping(tmp_path):
    trains_saves_loads_and_evaluates("ppo", "Pendulum-v1", {**TINY, "normalize_observations": True,
                                                            "normalize_rewards": True, "clip_value_loss": True,
                                                            "shared_network": True, "activation": "relu"}, tmp_path)


def test_the_same_seed_gives_identical_metrics():
    same_seed_gives_identical_metrics("ppo", "CartPole-v1", TINY)


def test_learning_rate_and_clip_range_anneal_linearly_to_zero():
    sink = ListSink()
    trainer.make("ppo", "CartPole-v1", seed=0, **TINY).learn(640, sink=sink, log_interval=32)
    rates = [e["values"]["train/learning_rate"] for e in sink.of_kind("train")]
    clips = [e["values"]["train/clip_range"] for e in sink.of_kind("train")]
    assert rates == sorted(rates, reverse=True) and rates[0] < 1e-3 and rates[-1] < 1e-4
    np.testing.assert_allclose(np.array(clips) / 0.2, np.array(rates) / 1e-3)


def test_target_kl_stops_the_epochs_early():
    agent = trainer.make("ppo", "CartPole-v1", seed=0, **{**TINY, "n_epochs": 50, "target_kl": 1e-6,
                                                         "learning_rate": 0.01, "lr_schedule": "constant"})
    steps = []
    original = agent.optimizer.step
    agent.optimizer.step = lambda *a, **k: steps.append(1) or original(*a, **k)
    agent.learn(32, eval_episodes=0)
    assert 0 < len(steps) < 50 * 4


def test_it_reports_its_statistics_as_means_over_every_minibatch_of_every_epoch(monkeypatch):
    """As stable-baselines3 logs them: 2 epochs of 4 minibatches give 8 values of each statistic, and the
    report is their mean, not the last epoch's."""
    import trainer.algorithms.ppo as ppo

    kls, fractions, value_losses = [], [], []

    def recorded_statistics(log_ratio, clip_range):
        approx_kl, clip_fraction = ratio_statistics(log_ratio, clip_range)
        kls.append(float(approx_kl))
        fractions.append(float(clip_fraction))
        return approx_kl, clip_fraction

    def recorded_value_loss(*args):
        loss = value_loss(*args)
        value_losses.append(float(loss.detach()))
        return loss

    monkeypatch.setattr(ppo, "ratio_statistics", recorded_statistics)
    monkeypatch.setattr(ppo, "value_loss", recorded_value_loss)
    sink = ListSink()
    agent = trainer.make("ppo", "CartPole-v1", seed=0, **{**TINY, "learning_rate": 0.01, "lr_schedule": "constant"})
    agent.learn(32, sink=sink, eval_episodes=0)
    (values,) = [event["values"] for event in sink.of_kind("train")]
    assert len(kls) == len(fractions) == len(value_losses) == 2 * 4
    assert values["train/approx_kl"] == pytest.approx(np.mean(kls))
    assert values["train/clip_fraction"] == pytest.approx(np.mean(fractions))
    assert values["train/value_loss"] == pytest.approx(np.mean(value_losses))
    assert kls[0] == pytest.approx(0.0, abs=1e-7)  # the first minibatch meets the policy that collected the data
    assert values["train/approx_kl"] != pytest.approx(np.mean(kls[4:]))


def test_rollouts_are_cut_only_where_the_runner_says_stop(tmp_path):
    sink = ListSink(stop_after=40)
    # a budget far beyond what a fast machine trains between two stop polls (0.5 s)
    summary = trainer.make("ppo", "CartPole-v1", seed=0, **TINY).learn(1_000_000, sink=sink, checkpoint_dir=tmp_path)
    assert summary["status"] == "cancelled" and (tmp_path / "final.zip").exists()


@pytest.mark.parametrize("algorithm", ["reinforce", "vpg", "a2c", "ppo", "rnd-ppo"])
def test_unsupported_spaces_are_refused_with_a_clear_message(algorithm):
    with pytest.raises(ConfigError) as error:  # Blackjack observes a Tuple
        trainer.validate(algorithm, "Blackjack-v1", {})
    assert "Tuple observations" in error.value.errors["env_id"]
    assert trainer.validate(algorithm, "Pendulum-v1", {})  # Box actions are fine


