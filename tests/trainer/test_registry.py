"""trainer.registry: the algorithm specs, their families, lookups and `validate`."""

from dataclasses import dataclass

import pytest
from gymnasium import spaces

import trainer
from trainer import registry
from trainer.params import ConfigError, param
from trainer.registry import FAMILIES, AlgorithmSpec, algorithm_names, algorithms_by_family, get_spec, validate


@dataclass
class ToyConfig:
    learning_rate: float = param(1e-3, "step size", low=0.0, low_inclusive=False)
    layers: int = param(2, "hidden layers", low=1, high=8)


def toy_spec(**changes) -> AlgorithmSpec:
    fields = dict(name="toy", family=registry.CLASSIC, description="a test algorithm", config_class=ToyConfig,
                  agent_class=object, observation_spaces=("Box",), action_spaces=("Discrete",))
    return AlgorithmSpec(**{**fields, **changes})


@pytest.fixture
def registered_toy(monkeypatch):
    """The toy spec registered for one test; the registry is left as it was."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return registry.register(toy_spec())


def test_every_algorithm_is_registered_once_trainer_is_imported():
    names = algorithm_names()
    for name in ("dqn", "ppo", "a2c", "sac", "ddpg", "td3", "qlearning", "es", "r2d1"):
        assert name in names
    assert len(names) == len(set(names))
    assert trainer.algorithm_names() == names


def test_families_come_in_their_fixed_order_and_hold_every_algorithm():
    groups = algorithms_by_family()
    families = [family for family, _ in groups]
    assert families == [family for family in FAMILIES if family in families]
    assert sorted(spec.name for _, specs in groups for spec in specs) == sorted(algorithm_names())
    assert all(spec.family == family for family, specs in groups for spec in specs)
    assert "dqn" in [spec.name for spec in dict(groups)[registry.DQN_FAMILY]]


def test_get_spec_returns_the_registered_spec(registered_toy):
    assert get_spec("toy") is registered_toy
    assert "toy" in algorithm_names()


def test_get_spec_names_the_known_algorithms_for_an_unknown_one():
    with pytest.raises(ConfigError) as caught:
        get_spec("not-an-algorithm")
    message = caught.value.errors["algorithm"]
    assert message.startswith("Unknown algorithm 'not-an-algorithm'. Known: ")
    assert "dqn" in message and "ppo" in message


def test_register_refuses_an_unknown_family(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(ValueError, match="unknown family 'Exotic'"):
        registry.register(toy_spec(family="Exotic"))
    assert "toy" not in algorithm_names()


def test_presets_change_the_defaults_of_the_params_and_the_built_config():
    spec = toy_spec(presets=(("layers", 5),))
    defaults = {p.name: p.default for p in spec.params()}
    assert defaults == {"learning_rate": 1e-3, "layers": 5, "processes": 1}  # one process: its config has none
    assert spec.build_config({}).layers == 5
    assert spec.build_config({"layers": "3"}).layers == 3  # given values win over presets
    assert {p.name: p.default for p in toy_spec().params()}["layers"] == 2


def test_check_spaces_says_which_action_or_observation_space_is_missing():
    spec = toy_spec()
    spec.check_spaces(spaces.Box(-1, 1, (3,)), spaces.Discrete(2))  # accepted
    with pytest.raises(ConfigError) as caught:
        spec.check_spaces(spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (1,)))
    assert caught.value.errors == {"env_id": "toy needs Discrete actions, but this environment has Box actions."}
    with pytest.raises(ConfigError) as caught:
        spec.check_spaces(spaces.Discrete(5), spaces.Discrete(2))
    assert caught.value.errors == {
        "env_id": "toy supports Box observations, but this environment has Discrete observations."}


def test_validate_returns_the_parsed_hyperparameters_with_defaults_filled_in():
    values = validate("dqn", "CartPole-v1", {"learning_rate": "0.0005", "batch_size": "32", "gamma": 0.9})
    assert values["learning_rate"] == 0.0005 and type(values["learning_rate"]) is float
    assert values["batch_size"] == 32 and type(values["batch_size"]) is int
    assert values["gamma"] == 0.9
    defaults = {p.name: p.default for p in get_spec("dqn").params()}
    assert set(values) == set(defaults)
    assert values["buffer_size"] == defaults["buffer_size"]


def test_validate_collects_every_error_at_once():
    with pytest.raises(ConfigError) as caught:
        validate("dqn", "Pendulum-v1", {"learning_rate": "fast", "batch_size": "0", "bogus": 1})
    errors = caught.value.errors
    assert set(errors) == {"learning_rate", "batch_size", "bogus", "env_id"}
    assert errors["learning_rate"] == "must be a number"
    assert errors["batch_size"] == "must be at least 1"
    assert errors["bogus"].startswith("unknown hyperparameter")
    assert errors["env_id"] == "dqn needs Discrete actions, but this environment has Box actions."


def test_validate_reports_an_unknown_env_id_beside_bad_hyperparameters():
    with pytest.raises(ConfigError) as caught:
        validate("ppo", "NoSuchEnv-v0", {"gamma": "2"})
    assert caught.value.errors == {"gamma": "must be at most 1", "env_id": "Unknown environment id 'NoSuchEnv-v0'."}


def test_validate_of_an_unknown_algorithm_fails_on_the_algorithm_alone():
    with pytest.raises(ConfigError) as caught:
        validate("nope", "CartPole-v1", {"anything": 1})
    assert set(caught.value.errors) == {"algorithm"}
