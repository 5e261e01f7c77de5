"""RL Zoo entries carried into our names (trainer/zoo.py): schedules, policy_kwargs read without evaluating
them, stable-baselines3's defaults underneath, and every carried preset a valid config."""

import pytest
import trainer
from trainer.envs import env_spaces
from trainer.params import ConfigError
from trainer.zoo import Unsupported, call_keywords, translate
from trainer.zoo_presets import ZOO_PRESETS


def test_a_linear_schedule_becomes_its_start_value_and_a_linear_schedule_setting():
    values = translate("ppo", {"learning_rate": "lin_2.5e-4", "clip_range": "lin_0.1"})["values"]
    assert (values["learning_rate"], values["lr_schedule"]) == (2.5e-4, "linear")
    assert (values["clip_range"], values["clip_schedule"]) == (0.1, "linear")


def test_a_decaying_rate_without_an_equivalent_is_said_so():
    translated = translate("sac", {"learning_rate": "lin_7.3e-4"})
    assert translated["values"]["policy_learning_rate"] == 7.3e-4
    assert "learning_rate" in translated["no_equivalent"]


def test_stable_baselines3_defaults_lie_under_an_entry():
    values = translate("ppo", {"n_timesteps": 1e6})["values"]
    assert values["n_steps"] == 2048 and values["batch_size"] == 64 and values["n_epochs"] == 10
    assert (values["learning_rate"], values["lr_schedule"]) == (3e-4, "constant")  # ours would decay
    assert values["hidden_layers"] == "64,64" and values["shared_network"] is False


def test_policy_kwargs_are_read_without_being_run():
    values = translate("ppo", {"policy_kwargs": "dict(net_arch=dict(pi=[400, 300], vf=[400, 300]), "
                                                "activation_fn=nn.ReLU, ortho_init=False, log_std_init=-2)"})["values"]
    assert (values["hidden_layers"], values["activation"], values["orthogonal_init"], values["log_std_init"]) == \
        ("400,300", "relu", False, -2.0)
    with pytest.raises(ValueError):
        call_keywords("__import__('os').system('echo no')")
    with pytest.raises((ValueError, Unsupported)):
        call_keywords("dict(net_arch=open('/etc/passwd').read())")


def test_an_atari_entry_has_no_hidden_layer_behind_the_cnn():
    values = translate("dqn", {"policy": "CnnPolicy", "learning_rate": 1e-4})["values"]
    assert values["hidden_layers"] == "none"


def test_gradient_steps_of_minus_one_are_as_many_as_env_steps_in_a_phase():
    assert translate("sac", {"train_freq": 8, "gradient_steps": -1, "n_envs": 2})["values"]["gradient_steps"] == 16


@pytest.mark.parametrize("ent_coef, auto, alpha", [("auto", True, 1.0), ("auto_0.1", True, 0.1), (0.2, False, 0.2)])
def test_sacs_entropy_coefficient_becomes_auto_alpha_and_alpha(ent_coef, auto, alpha):
    values = translate("sac", {"ent_coef": ent_coef})["values"]
    assert (values["auto_alpha"], values["alpha"]) == (auto, alpha)


def test_training_every_episode_has_no_equivalent():
    translated = translate("td3", {"train_freq": [1, "episode"]})
    assert "train_freq" in translated["no_equivalent"] and "train_frequency" not in translated["values"]


def test_normalize_given_as_text_sets_observations_and_rewards_apart():
    values = translate("ppo", {"normalize": "{'norm_obs': True, 'norm_reward': False}"})["values"]
    assert (values["normalize_observations"], values["normalize_rewards"]) == (True, False)


@pytest.mark.parametrize("key", sorted(ZOO_PRESETS))
def test_every_carried_preset_is_a_valid_config_in_our_names(key):
    algorithm, env_id = key
    entry = ZOO_PRESETS[key]
    spec = trainer.get_spec(algorithm)
    names = {p.name for p in spec.params()}
    assert set(entry["values"]) <= names  # stored in our names, not the aliases
    spec.build_config(entry["values"])
    assert entry["source"].startswith("RL Zoo 2.9.2, hyperparams/")


@pytest.mark.parametrize("key", [key for key in sorted(ZOO_PRESETS) if key[1] != "atari"])
def test_every_carried_preset_fits_its_environment(key):
    algorithm, env_id = key
    try:
        env_spaces(env_id)
    except ConfigError:
        pytest.skip(f"{env_id} cannot be made here")
    trainer.validate(algorithm, env_id, ZOO_PRESETS[key]["values"])
