"""One name per hyperparameter idea across algorithms; the other spellings (ours before, the source documents',
stable-baselines3's) are accepted as aliases wherever a config is built (trainer/params.py, ALIASES)."""

import json
import zipfile

import numpy as np
import pytest
import trainer
from trainer.params import ALIASES, BEFORE, ConfigError, check_live_changes

ALGORITHMS = trainer.algorithm_names()


def config_of(algorithm: str, **hyperparameters):
    return trainer.get_spec(algorithm).build_config(hyperparameters)


def test_no_algorithm_uses_a_name_that_is_an_alias():
    for algorithm in ALGORITHMS:
        names = [p.name for p in trainer.get_spec(algorithm).params()]
        assert not set(names) & set(ALIASES), algorithm


def test_every_alias_names_a_hyperparameter_that_some_algorithm_has():
    names = {p.name for algorithm in ALGORITHMS for p in trainer.get_spec(algorithm).params()}
    assert {name for name, _, _ in ALIASES.values()} <= names


@pytest.mark.parametrize("algorithm, alias, value, name", [
    ("a2c", "entropy_beta", 0.02, "entropy_coef"),
    ("a2c", "ent_coef", 0.02, "entropy_coef"),
    ("ppo", "ent_coef", 0.02, "entropy_coef"),
    ("vpg", "entropy_beta", 0.02, "entropy_coef"),
    ("a2c", "critic_beta", 0.25, "value_coef"),
    ("ppo", "vf_coef", 0.25, "value_coef"),
    ("a2c", "lr_pi", 3e-4, "policy_learning_rate"),
    ("a2c", "lr_v", 3e-4, "critic_learning_rate"),
    ("vpg", "value_learning_rate", 3e-4, "critic_learning_rate"),
    ("sac", "q_learning_rate", 3e-4, "critic_learning_rate"),
    ("td3", "q_learning_rate", 3e-4, "critic_learning_rate"),
    ("ppo", "adam_eps", 1e-7, "optimizer_epsilon"),
    ("a2c", "optimizer_eps", 1e-7, "optimizer_epsilon"),
    ("dqn", "adam_epsilon", 1e-7, "optimizer_epsilon"),
    ("r2d1", "adam_epsilon", 1e-7, "optimizer_epsilon"),
    ("dqn", "target_update_tau", 0.5, "tau"),
    ("dqn", "n_step", 3, "n_step_return"),
    ("r2d1", "n_step", 3, "n_step_return"),
    ("dqn", "train_freq", 8, "train_frequency"),
    ("sac", "normalize_observation", True, "normalize_observations"),
    ("ddpg", "normalize_reward", True, "normalize_rewards"),
    ("es", "normalize_observation", True, "normalize_observations"),
    ("td3", "num_updates_per_iter", 2, "gradient_steps"),
    ("dqn", "n_envs", 4, "num_envs"),
    ("sac", "replay_size", 5_000, "buffer_size"),
    ("es", "l2_coeff", 0.01, "l2_coef"),
    ("rnd-ppo", "ext_adv_coeff", 1.5, "ext_adv_coef"),
    ("rnd-ppo", "int_adv_coeff", 0.5, "int_adv_coef"),
    ("qlearning", "epsilon_start", 0.9, "exploration_initial_eps"),
    ("qlearning", "epsilon_decay", 0.999, "exploration_decay"),
    ("qlearning", "epsilon_min", 0.05, "exploration_final_eps"),
    ("reinforce", "normalize_returns", False, "normalize_batch_returns"),
    ("vpg", "normalize_returns", True, "normalize_batch_returns"),
])
def test_an_alias_sets_the_hyperparameter_of_our_name(algorithm, alias, value, name):
    assert getattr(config_of(algorithm, **{alias: value}), name) == value


def test_every_coefficient_is_spelt_coef_as_in_stable_baselines3_and_cleanrl():
    names = {p.name for algorithm in ALGORITHMS for p in trainer.get_spec(algorithm).params()}
    assert not [name for name in names if name.endswith("_coeff")]
    assert {"entropy_coef", "value_coef", "l2_coef", "ext_adv_coef", "int_adv_coef"} <= names


def test_qlearning_names_its_epsilon_schedule_as_the_dqn_family_does():
    qlearning = {p.name for p in trainer.get_spec("qlearning").params()}
    dqn = {p.name for p in trainer.get_spec("dqn").params()}
    assert {"exploration_initial_eps", "exploration_final_eps"} <= qlearning & dqn
    assert not [name for name in qlearning if name.startswith("epsilon")]


def test_per_batch_return_normalisation_and_running_reward_scaling_have_different_names():
    for algorithm in ("reinforce", "vpg"):
        names = {p.name for p in trainer.get_spec(algorithm).params()}
        assert "normalize_batch_returns" in names and "normalize_rewards" not in names
    for algorithm in ("a2c", "ppo", "sac", "ddpg"):
        names = {p.name for p in trainer.get_spec(algorithm).params()}
        assert "normalize_rewards" in names and "normalize_batch_returns" not in names


def test_a_stored_config_with_the_names_before_the_coef_and_epsilon_renames_builds_the_new_one():
    old = {"qlearning": {"epsilon_start": 0.9, "epsilon_decay": 0.99, "epsilon_min": 0.05, "gamma": 0.9},
           "es": {"l2_coeff": 0.01}, "rnd-ppo": {"ext_adv_coeff": 1.5, "int_adv_coeff": 0.5},
           "reinforce": {"normalize_returns": False}, "vpg": {"normalize_returns": True}}
    new = {"qlearning": {"exploration_initial_eps": 0.9, "exploration_decay": 0.99, "exploration_final_eps": 0.05,
                         "gamma": 0.9},
           "es": {"l2_coef": 0.01}, "rnd-ppo": {"ext_adv_coef": 1.5, "int_adv_coef": 0.5},
           "reinforce": {"normalize_batch_returns": False}, "vpg": {"normalize_batch_returns": True}}
    for algorithm, values in old.items():
        assert config_of(algorithm, **values) == config_of(algorithm, **new[algorithm]), algorithm


def test_a_live_change_under_an_old_name_of_a_run_stored_with_old_names_gets_the_new_name():
    config_class = trainer.get_spec("qlearning").config_class
    current = {"epsilon_start": 1.0, "epsilon_decay": 0.999, "epsilon_min": 0.05}
    assert check_live_changes(config_class, current, {"epsilon_min": 0.02}) == {"exploration_final_eps": 0.02}
    assert check_live_changes(config_class, current, {"exploration_decay": 0.99}) == {"exploration_decay": 0.99}


def test_stable_baselines3_net_arch_is_read_as_hidden_layers():
    assert config_of("ppo", net_arch=[64, 32]).hidden_layers == "64,32"
    assert config_of("sac", net_arch={"pi": [64, 64], "qf": [64, 64]}).hidden_layers == "64,64"
    with pytest.raises(ConfigError) as error:  # different actor and critic sizes have no equivalent here
        config_of("ppo", net_arch={"pi": [64], "vf": [32]})
    assert set(error.value.errors) == {"hidden_layers"}


@pytest.mark.parametrize("value, schedule", [(True, "linear"), (False, "constant"), ("true", "linear")])
def test_ddpgs_old_annealing_switch_becomes_the_schedule_the_others_have(value, schedule):
    assert config_of("ddpg", lr_annealing=value).lr_schedule == schedule


def test_an_alias_of_a_preset_overrides_the_preset():
    assert config_of("td3").delay_policy_update == 2  # td3's preset
    assert config_of("td3", policy_delay=3).delay_policy_update == 3  # stable-baselines3's name for it


def test_one_setting_under_two_names_is_refused_naming_both():
    with pytest.raises(ConfigError) as error:
        config_of("ppo", ent_coef=0.1, entropy_coef=0.2)
    assert error.value.errors == {"entropy_coef": "given twice: as ent_coef and as entropy_coef"}


def test_an_alias_is_unknown_to_an_algorithm_without_that_idea():
    with pytest.raises(ConfigError) as error:
        config_of("ppo", n_step=3)  # n-step returns are a replay idea; ppo's rollout length is n_steps
    assert error.value.errors["n_step"].startswith("unknown hyperparameter")


def test_help_texts_name_the_upstream_spelling_but_not_our_old_one():
    params = {p.name: p for p in trainer.get_spec("a2c").params()}
    assert params["entropy_coef"].aliases_text() == ("Also accepted as entropy_beta (Lightning Bolts), "
                                                     "ent_coef (stable-baselines3).")
    assert "optimizer_eps" not in params["optimizer_epsilon"].aliases_text()
    assert dict(params["optimizer_epsilon"].aliases)["optimizer_eps"] == BEFORE
    assert params["entropy_coef"].describe()["aliases"]["ent_coef"] == "stable-baselines3"


def test_a_checkpoint_saved_with_the_old_names_loads(tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", hidden_layers="8", buffer_size=500, batch_size=8, learning_starts=8,
                         optimizer_epsilon=1e-6, tau=0.5, n_step_return=2)
    path = agent.save(tmp_path / "new.zip")
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        weights = archive.read("model.safetensors")
    hyperparameters = config["hyperparameters"]
    for old, new in (("adam_epsilon", "optimizer_epsilon"), ("target_update_tau", "tau"), ("n_step", "n_step_return")):
        hyperparameters[old] = hyperparameters.pop(new)
    old = tmp_path / "old.zip"
    with zipfile.ZipFile(old, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.safetensors", weights)
    loaded = trainer.load(old)
    assert (loaded.config.optimizer_epsilon, loaded.config.tau, loaded.config.n_step_return) == (1e-6, 0.5, 2)
    assert "adam_epsilon" not in loaded.hyperparameters()


def rewrite_checkpoint(path, old_path, rename: dict[str, str]) -> None:
    """A copy of the checkpoint at `path`, its config's hyperparameters under the names `rename` maps back to."""
    with zipfile.ZipFile(path) as archive, zipfile.ZipFile(old_path, "w") as old:
        for name in archive.namelist():
            content = archive.read(name)
            if name == "config.json":
                config = json.loads(content)
                config["hyperparameters"] = {rename.get(key, key): value
                                             for key, value in config["hyperparameters"].items()}
                content = json.dumps(config)
            old.writestr(name, content)


def test_a_qlearning_checkpoint_saved_with_its_old_epsilon_names_loads_and_acts_the_same(tmp_path):
    agent = trainer.make("qlearning", "FrozenLake-v1", seed=0, exploration_initial_eps=0.8, exploration_decay=0.99,
                         exploration_final_eps=0.1)
    agent.learn(200, eval_episodes=0)
    path = agent.save(tmp_path / "new.zip")
    rewrite_checkpoint(path, tmp_path / "old.zip", {"exploration_initial_eps": "epsilon_start",
                                                    "exploration_decay": "epsilon_decay",
                                                    "exploration_final_eps": "epsilon_min"})
    loaded = trainer.load(tmp_path / "old.zip")
    config = loaded.config
    assert (config.exploration_initial_eps, config.exploration_decay, config.exploration_final_eps) == (0.8, 0.99, 0.1)
    assert loaded.epsilon == agent.epsilon and np.array_equal(loaded.q_table(), agent.q_table())
    states = np.arange(16)
    assert np.array_equal(loaded.act(states, True), agent.act(states, True))


def test_an_es_checkpoint_saved_with_l2_coeff_loads(tmp_path):
    agent = trainer.make("es", "CartPole-v1", seed=0, hidden_layers="8", l2_coef=0.02)
    path = agent.save(tmp_path / "new.zip")
    rewrite_checkpoint(path, tmp_path / "old.zip", {"l2_coef": "l2_coeff"})
    assert trainer.load(tmp_path / "old.zip").config.l2_coef == 0.02
