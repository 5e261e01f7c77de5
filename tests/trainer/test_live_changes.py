"""Hyperparameters changed while a run trains: the schema says which are live, the runner takes the changes from
its sink, checks them as a new config is checked, applies them to the agent and reports a `hyperparameters` event."""

from __future__ import annotations

import math

import pytest

import trainer
from trainer.continuous import OrnsteinUhlenbeckNoise
from trainer.events import ListSink
from trainer.params import ConfigError, NOT_LIVE, check_live_changes

TINY_DQN = dict(learning_starts=50, batch_size=16, buffer_size=1000, train_frequency=4, gradient_steps=1,
                hidden_layers="32")
TINY_PPO = dict(num_envs=2, n_steps=32, batch_size=32, n_epochs=2, hidden_layers="16")
TINY_CONTINUOUS = dict(learning_starts=64, batch_size=32, buffer_size=1000, hidden_layers="16")
SIZES = ("hidden_layers", "buffer_size", "num_envs", "rnd_hidden_layers", "hidden_size", "lstm_size", "num_atoms")


def changes_of(sink: ListSink) -> list[dict]:
    return sink.of_kind("hyperparameters")


@pytest.mark.parametrize("algorithm", trainer.algorithm_names())
def test_sizes_of_networks_and_buffers_are_never_live(algorithm):
    params = {p.name: p for p in trainer.get_spec(algorithm).params()}
    assert not [name for name in SIZES if name in params and params[name].live]
    assert all(p.describe()["live"] == p.live for p in params.values())


def test_each_family_declares_its_learning_rates_and_coefficients_live():
    def live(algorithm):
        return {p.name for p in trainer.get_spec(algorithm).params() if p.live}

    assert {"learning_rate", "exploration_final_eps", "max_grad_norm"} <= live("dqn")
    assert {"learning_rate", "entropy_coef", "clip_range", "value_coef", "max_grad_norm"} <= live("ppo")
    assert {"policy_learning_rate", "critic_learning_rate", "entropy_coef", "value_coef"} <= live("a2c")
    assert {"policy_learning_rate", "critic_learning_rate", "alpha_learning_rate", "alpha"} <= live("sac")
    assert {"policy_learning_rate", "critic_learning_rate", "action_noise", "target_noise"} <= live("td3")


def test_a_change_is_checked_as_a_new_config_is():
    config_class = trainer.get_spec("ppo").config_class
    current = trainer.get_spec("ppo").build_config({}).__dict__
    assert check_live_changes(config_class, current, {"ent_coef": "0.01", "clip_range": "0.1"}) == {
        "entropy_coef": 0.01, "clip_range": 0.1}  # upstream names, text as from a form
    with pytest.raises(ConfigError) as refused:
        check_live_changes(config_class, current, {"learning_rate": "0", "hidden_layers": "8", "nonsense": 1})
    assert refused.value.errors == {"hidden_layers": NOT_LIVE, "nonsense": "unknown hyperparameter"}
    with pytest.raises(ConfigError) as refused:
        check_live_changes(config_class, current, {"learning_rate": "0"})
    assert refused.value.errors == {"learning_rate": "must be greater than 0"}
    with pytest.raises(ConfigError) as refused:  # the config's own cross-field checks run too
        check_live_changes(trainer.get_spec("dqn").config_class, {"exploration_final_eps_min": 0.05},
                           {"exploration_final_eps": 0.01})
    assert "exploration_final_eps_min" in refused.value.errors


def test_a_setting_the_run_ignores_is_refused_with_why():
    """A noisy DQN explores without epsilon: a change of epsilon's end would be a silent no-op."""
    config_class = trainer.get_spec("rainbow").config_class
    current = trainer.get_spec("rainbow").build_config({}).__dict__
    with pytest.raises(ConfigError) as refused:
        check_live_changes(config_class, current, {"exploration_final_eps": "0.1", "learning_rate": "0.0001"})
    assert refused.value.errors == {"exploration_final_eps": "has no effect on this run: noisy layers explore "
                                                             "instead of epsilon"}
    assert check_live_changes(config_class, current, {"learning_rate": "0.0001"}) == {"learning_rate": 0.0001}
    plain = trainer.get_spec("dqn").config_class
    assert check_live_changes(plain, {}, {"exploration_final_eps": "0.1"}) == {"exploration_final_eps": 0.1}


def test_dqn_applies_a_change_at_its_step_and_reports_old_and_new_values():
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **TINY_DQN)
    sink = ListSink(changes=[{"id": "x1", "step": 200, "values": {"learning_rate": "0.0005",
                                                                     "exploration_final_eps": "0.2"}}])
    agent.learn(400, sink=sink)
    (event,) = changes_of(sink)
    assert event["step"] == 200
    assert event["values"] == {"id": "x1", "changes": {"learning_rate": {"old": 0.0023, "new": 0.0005},
                                                        "exploration_final_eps": {"old": 0.04, "new": 0.2}}}
    assert agent.optimizer.param_groups[0]["lr"] == 0.0005 and agent.config.learning_rate == 0.0005
    assert agent.epsilons[0](1.0) == pytest.approx(0.2)  # the epsilon schedule ends at the new value
    assert agent.hyperparameters()["learning_rate"] == 0.0005  # what a checkpoint saves


def test_a_refused_change_is_reported_and_the_run_goes_on():
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **TINY_DQN)
    sink = ListSink(changes=[{"id": 7, "values": {"learning_rate": "-1"}}, {"values": {"buffer_size": 10}}])
    summary = agent.learn(300, sink=sink)
    bad_value, not_live = changes_of(sink)
    assert bad_value["values"]["errors"] == {"learning_rate": "must be greater than 0"}
    assert bad_value["values"]["id"] == 7 and bad_value["values"]["requested"] == {"learning_rate": "-1"}
    assert not_live["values"]["errors"] == {"buffer_size": NOT_LIVE}
    assert summary["status"] == "succeeded" and summary["steps"] == 300
    assert agent.optimizer.param_groups[0]["lr"] == 0.0023 and agent.config.buffer_size == 1000


def test_a_checkpoint_saved_after_a_change_holds_the_new_value(tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **TINY_DQN)
    agent.apply_live_changes(agent.check_live_changes({"learning_rate": 0.0001}))
    loaded = trainer.load(agent.save(tmp_path / "changed.zip"), device="cpu")
    assert loaded.config.learning_rate == 0.0001 and loaded.optimizer.param_groups[0]["lr"] == 0.0001


def test_ppo_a_new_learning_rate_becomes_the_base_of_its_linear_schedule():
    agent = trainer.make("ppo", "CartPole-v1", seed=0, device="cpu", **TINY_PPO)
    assert agent.config.lr_schedule == "linear"
    old = agent.apply_live_changes(agent.check_live_changes({"learning_rate": 0.002, "clip_range": 0.3,
                                                             "entropy_coef": 0.01}), progress=0.25)
    assert old == {"learning_rate": 0.001, "clip_range": 0.2, "entropy_coef": 0.0}
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(0.002 * 0.75)  # at once, on the schedule

    sink = ListSink(changes=[{"step": 128, "values": {"learning_rate": 0.0004}}])
    agent = trainer.make("ppo", "CartPole-v1", seed=0, device="cpu", **TINY_PPO)
    agent.learn(256, sink=sink)
    (event,) = changes_of(sink)
    assert event["step"] == 128
    # each update from then on anneals the new base: lr = 0.0004 x (1 - progress)
    last = sink.of_kind("train")[-1]["values"]
    assert last["train/learning_rate"] == pytest.approx(0.0004 * (1 - 256 / 256), abs=1e-12)
    assert agent.config.learning_rate == 0.0004


def test_a2c_changes_each_learning_rate_in_its_own_parameter_group():
    agent = trainer.make("a2c", "CartPole-v1", seed=0, device="cpu", hidden_layers="16")
    agent.apply_live_changes(agent.check_live_changes({"critic_learning_rate": 0.01}))
    actor, critic = agent.optimizer.param_groups
    assert critic["lr"] == 0.01 and actor["lr"] == agent.config.policy_learning_rate == 7e-4


def test_sac_changes_its_optimizers_learning_rates_and_alpha_during_a_run():
    agent = trainer.make("sac", "Pendulum-v1", seed=0, device="cpu", **TINY_CONTINUOUS)
    sink = ListSink(changes=[{"step": 100, "values": {"policy_learning_rate": 0.0002, "critic_learning_rate": 0.003,
                                                      "alpha_learning_rate": 0.0001, "alpha": 0.5, "tau": 0.01}}])
    agent.learn(120, sink=sink)
    (event,) = changes_of(sink)
    assert event["step"] == 100 and "error" not in event["values"]
    assert agent.actor_optimizer.param_groups[0]["lr"] == 0.0002
    assert agent.critic_optimizer.param_groups[0]["lr"] == 0.003
    assert agent.alpha_optimizer.param_groups[0]["lr"] == 0.0001
    # alpha starts again from 0.5 and is tuned on from there (a few updates since)
    assert math.exp(agent.log_alpha.value.item()) == pytest.approx(0.5, rel=0.05)
    assert agent.config.tau == 0.01


def test_td3_changes_its_learning_rates_and_exploration_noise():
    agent = trainer.make("td3", "Pendulum-v1", seed=0, device="cpu", noise_type="ornstein-uhlenbeck",
                         **TINY_CONTINUOUS)
    sink = ListSink(changes=[{"step": 100, "values": {"policy_learning_rate": 0.0002, "critic_learning_rate": 0.003,
                                                      "action_noise": 0.3, "target_noise": 0.1}}])
    agent.learn(120, sink=sink)
    assert changes_of(sink)[0]["step"] == 100
    assert agent.actor_optimizer.param_groups[0]["lr"] == 0.0002
    assert agent.critic_optimizer.param_groups[0]["lr"] == 0.003
    assert agent.ou_noise.sigma == 0.3 and agent.config.target_noise == 0.1


def test_td3_action_noise_reaches_a_noise_process_made_before():
    agent = trainer.make("td3", "Pendulum-v1", seed=0, device="cpu", **TINY_CONTINUOUS)
    agent.ou_noise = OrnsteinUhlenbeckNoise(1, 1, agent.config.action_noise)
    agent.apply_live_changes(agent.check_live_changes({"action_noise": 0.05}))
    assert agent.ou_noise.sigma == 0.05
