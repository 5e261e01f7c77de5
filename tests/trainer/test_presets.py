"""Presets: the settings tuned for an environment, or its family's defaults, under the user's own values."""

import pytest
import trainer
from trainer import presets
from trainer.cli import main
from trainer.params import ConfigError

from tests.trainer.stop_when_solved import StopWhenSolved


@pytest.mark.parametrize("algorithm, env_id, name, description", [
    ("dqn", "Acrobot-v1", "zoo:Acrobot-v1", "RL Zoo: tuned for Acrobot-v1"),
    ("ppo", "LunarLander-v3", "zoo:LunarLander-v3", "RL Zoo: tuned for LunarLander-v3"),
    ("sac", "Hopper-v5", "zoo:Hopper-v5", "RL Zoo: tuned for Hopper-v4"),
    ("dqn", "ALE/Pong-v5", "atari", "RL Zoo: its Atari settings"),
    ("c51", "ALE/Breakout-v5", "atari", "Nature-DQN-style Atari settings (as RL Zoo's dqn)"),
    ("rainbow", "ALE/Pong-v5", "atari", "Rainbow's Atari settings (Hessel et al. 2018)"),
    ("td3", "InvertedPendulum-v5", "mujoco", "RL Zoo: its MuJoCo defaults (tuned for HalfCheetah-v4)"),
])
def test_an_environment_gets_its_tuned_settings_or_its_familys(algorithm, env_id, name, description):
    preset = presets.find(algorithm, env_id)
    assert (preset.name, preset.description) == (name, description)
    trainer.validate(algorithm, env_id, preset.values)


def test_an_environment_nobody_tuned_for_keeps_the_algorithms_defaults():
    assert presets.find("qlearning", "FrozenLake-v1") is None
    assert presets.find("dqn", "FrozenLake-v1") is None


def test_the_atari_dqn_settings_are_those_an_atari_agent_learns_with():
    values = presets.find("dqn", "ALE/Pong-v5").values
    assert (values["learning_rate"], values["hidden_layers"], values["train_frequency"], values["gradient_steps"],
            values["batch_size"]) == (1e-4, "none", 4, 1, 32)


def test_make_starts_from_the_preset_and_the_users_values_go_on_top_under_any_name():
    agent = trainer.make("ppo", "CartPole-v1", preset="auto", ent_coef=0.05, n_epochs=3)
    tuned = presets.find("ppo", "CartPole-v1").values
    assert agent.preset == "zoo:CartPole-v1"
    assert (agent.config.entropy_coef, agent.config.n_epochs) == (0.05, 3)
    assert agent.config.n_steps == tuned["n_steps"] and agent.config.learning_rate == tuned["learning_rate"]


def test_without_a_preset_make_keeps_the_plain_defaults():
    agent = trainer.make("dqn", "Acrobot-v1")
    assert agent.preset is None and agent.config.learning_rate == 2.3e-3


def test_an_unknown_preset_name_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError) as error:
        trainer.make("dqn", "Acrobot-v1", preset="zoo:Nowhere-v0")
    assert "zoo:Acrobot-v1" in error.value.errors["preset"] and "auto" in error.value.errors["preset"]


def test_the_command_line_trains_with_the_preset_and_says_which(tmp_path, capsys):
    assert main(["train", "dqn", "Acrobot-v1", "--total-steps", "300", "--out", str(tmp_path / "a"),
                 "--set", "learning_starts=100", "--set", "batch_size=32"]) == 0
    err = capsys.readouterr().err
    assert "preset: zoo:Acrobot-v1: RL Zoo: tuned for Acrobot-v1 (RL Zoo 2.9.2, hyperparams/dqn.yml: Acrobot-v1)" in err
    config = trainer.load(tmp_path / "a" / "final.zip").config
    assert (config.learning_rate, config.target_update_interval, config.batch_size) == (6.3e-4, 250, 32)


def test_the_command_line_keeps_the_defaults_with_preset_none(tmp_path, capsys):
    assert main(["train", "dqn", "Acrobot-v1", "--total-steps", "300", "--out", str(tmp_path / "b"),
                 "--preset", "none", "--set", "learning_starts=100"]) == 0
    assert "preset: none" in capsys.readouterr().err
    assert trainer.load(tmp_path / "b" / "final.zip").config.learning_rate == 2.3e-3


def test_the_presets_command_lists_them_with_their_source_and_what_has_no_equivalent(capsys):
    assert main(["presets", "ppo", "ALE/Pong-v5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("atari: RL Zoo: its Atari settings (RL Zoo 2.9.2, hyperparams/ppo.yml: atari)")
    assert "  clip_schedule = 'linear'" in out and "(no equivalent: frame_stack: Atari envs always stack 4 frames)" in out
    assert main(["presets", "sac"]) == 0
    assert "zoo:Pendulum-v1" in capsys.readouterr().out
    assert main(["presets", "qlearning", "FrozenLake-v1"]) == 0
    assert "no preset" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.learning
def test_dqn_with_its_acrobot_preset_swings_up_where_the_plain_defaults_never_do():
    """The issue's case: with the form's defaults dqn ended at -500 on Acrobot-v1 after 100k steps (3 of 3
    seeds); with RL Zoo's Acrobot settings it passes -100 within 30k steps and reaches about -70 at 100k (seed 0:
    -77.1 after a 40k-step run, 40 s on one core; -69.2 after 100k). The last evaluation alone swings with the
    CPU's float rounding (AVX2 or AVX512: -77.1 on one machine, -132.7 and -169.9 on another, the same seed), so
    the check is the best of its evaluations every 5k steps (-80.4 there); the run stops at the first above -100."""
    agent = trainer.make("dqn", "Acrobot-v1", seed=0, preset="auto")
    summary = agent.learn(40_000, sink=StopWhenSolved(-99.9), eval_interval=5_000, eval_episodes=10)
    assert summary["best_eval_return"] > -100, summary


def test_train_algo_help_lists_its_hyperparameters_with_their_upstream_names(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "a2c", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "hyperparameters of a2c (--set NAME=VALUE, on top of the preset):" in out
    assert "  entropy_coef (float, default 0.0, live) [0..10]: Entropy bonus coefficient. Also accepted as entropy_beta " \
           "(Lightning Bolts), ent_coef (stable-baselines3)." in out
