import pickle

import pytest

import trainer
from trainer.algorithms.dqn import DQNConfig
from trainer.params import ConfigError, build_config, schema


def param_named(name):
    return next(p for p in schema(DQNConfig) if p.name == name)


def test_it_converts_form_strings_to_real_types():
    config = build_config(DQNConfig, {"learning_rate": "1e-3", "batch_size": "32", "hidden_layers": "64, 64"})
    assert config.learning_rate == pytest.approx(1e-3)
    assert config.batch_size == 32 and isinstance(config.batch_size, int)


@pytest.mark.parametrize("raw", ["abc", "", "1.5", "nan"])
def test_it_rejects_a_non_whole_number_for_an_int(raw):
    with pytest.raises(ValueError, match="whole number"):
        param_named("batch_size").parse(raw)


@pytest.mark.parametrize("raw, message", [("0", "greater than 0"), ("-1e-3", "greater than 0"),
                                          ("abc", "must be a number"), ("inf", "finite")])
def test_it_rejects_bad_learning_rates(raw, message):
    with pytest.raises(ValueError, match=message):
        param_named("learning_rate").parse(raw)


def test_it_accepts_a_float_written_as_a_whole_number_for_an_int():
    assert param_named("buffer_size").parse("1e4") == 10_000


def test_it_rejects_a_batch_larger_than_the_buffer():
    with pytest.raises(ConfigError) as caught:
        build_config(DQNConfig, {"batch_size": 512, "buffer_size": 100})
    assert "buffer" in caught.value.errors["batch_size"]


def test_it_lists_every_bad_field_at_once():
    with pytest.raises(ConfigError) as caught:
        build_config(DQNConfig, {"learning_rate": "-1", "gamma": "2", "nonsense": 1})
    assert set(caught.value.errors) == {"learning_rate", "gamma", "nonsense"}


def test_it_rejects_unknown_env_ids_with_a_suggestion():
    with pytest.raises(ConfigError) as caught:
        trainer.validate("dqn", "CartPole-v9", {})
    assert "Unknown environment id" in caught.value.errors["env_id"]
    assert "CartPole-v1" in caught.value.errors["env_id"]


def test_it_rejects_continuous_actions_for_dqn():
    with pytest.raises(ConfigError) as caught:
        trainer.validate("dqn", "Pendulum-v1", {})
    assert "Discrete actions" in caught.value.errors["env_id"]
    assert "Box" in caught.value.errors["env_id"]


def test_it_rejects_unknown_algorithms():
    with pytest.raises(ConfigError) as caught:
        trainer.validate("dqm", "CartPole-v1", {})
    assert "dqn" in caught.value.errors["algorithm"]


def test_schema_describes_itself_as_json():
    described = param_named("learning_rate").describe()
    assert described["type"] == "float" and described["low"] == 0 and described["low_inclusive"] is False
    assert described["help"]


@pytest.mark.parametrize("name, raw", [("learning_starts", "1e308"), ("learning_starts", str(10**30)),
                                       ("target_update_interval", str(2**63)), ("max_grad_norm", "1e308")])
def test_it_refuses_numbers_no_hyperparameter_needs_even_without_bounds_of_its_own(name, raw):
    with pytest.raises(ConfigError) as error:
        build_config(DQNConfig, {name: raw})
    assert "between" in error.value.errors[name]


@pytest.mark.parametrize("name, raw, message", [("learning_rate", "1e32", "must be at most 1"),
                                                ("learning_rate", "-1e32", "must be greater than 0"),
                                                ("max_grad_norm", "-1e13", "must be at least 0")])
def test_it_states_the_fields_own_bound_for_a_huge_number(name, raw, message):
    with pytest.raises(ConfigError) as error:
        build_config(DQNConfig, {name: raw})
    assert error.value.errors[name] == message


# --- the per-step work budget (issue 27: a legal gradient_steps=100000 stalled a run) --------------------
def test_gradient_steps_past_100_updates_per_env_step_are_refused_with_the_numbers():
    with pytest.raises(ConfigError) as caught:
        build_config(DQNConfig, {"gradient_steps": 100_000})  # a phase every 256 env steps: 391 per step
    message = caught.value.errors["gradient_steps"]
    assert "at most 25,600" in message and "100 gradient updates per env step" in message and "391" in message
    assert build_config(DQNConfig, {"gradient_steps": 25_600}).gradient_steps == 25_600


def test_the_budget_follows_train_frequency_and_the_vector_step():
    assert build_config(DQNConfig, {"train_frequency": 1_000, "gradient_steps": 100_000}).gradient_steps == 100_000
    with pytest.raises(ConfigError, match="at most 100 here"):
        build_config(trainer.get_spec("sac").config_class, {"gradient_steps": 101})  # train_frequency 1
    # with 8 envs a phase comes at most once per vector step of 8 env steps
    assert build_config(DQNConfig, {"train_frequency": 1, "num_envs": 8, "gradient_steps": 800}).gradient_steps == 800


def test_a_replay_ratio_replaces_the_phase_and_is_bounded_by_the_same_budget():
    assert build_config(DQNConfig, {"replay_ratio": 2, "gradient_steps": 100_000}).replay_ratio == 2
    with pytest.raises(ConfigError, match="at most 100"):
        build_config(DQNConfig, {"replay_ratio": 101})


def test_ppo_epochs_past_100_updates_per_env_step_are_refused():
    config_class = trainer.get_spec("ppo").config_class
    values = {"n_steps": 64, "num_envs": 1, "batch_size": 8}  # 8 minibatches of a 64-step rollout
    assert build_config(config_class, {**values, "n_epochs": 800}).n_epochs == 800
    with pytest.raises(ConfigError) as caught:
        build_config(config_class, {**values, "n_epochs": 801})
    assert "must be at most 800 here" in caught.value.errors["n_epochs"]
    assert "batch_size" in caught.value.errors["n_epochs"]


def test_every_preset_is_within_the_work_budget():
    from trainer import presets
    for name in trainer.algorithm_names():
        for preset in presets.listing(name):
            trainer.get_spec(name).build_config(dict(preset.values))


def test_a_config_error_comes_back_whole_from_another_process():
    """A pool's worker raising it used to kill the pool's result thread (its text became the `errors` dict on
    unpickling), so the parent waited for ever: the GPU check's Atari comparison hung so."""
    error = ConfigError({"learning_rate": "must be positive", "env_id": "unknown"})
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ConfigError and again.errors == error.errors and str(again) == str(error)
