"""Environment ids: checked against Gymnasium's registry without importing anything, and every registered id
either makes an env or is refused with a message (never another exception)."""

import sys
import warnings

import gymnasium as gym
import pytest

import trainer
from trainer.envs import check_env_id, env_spaces, known_env_ids, make_env

# Registered ids that raised something other than ConfigError before: placeholders that need mujoco-py or
# shimmy, JAX functional envs, Atari games without a NOOP action, a MuJoCo id that needs mujoco<3
FORMERLY_FAILING = ["Ant-v2", "HalfCheetah-v3", "Walker2d-v2", "GymV21Environment-v0", "GymV26Environment-v0",
                    "phys2d/CartPole-v1", "tabular/Blackjack-v0", "Pusher-v4"]


@pytest.fixture
def pwnmod(tmp_path, monkeypatch):
    """A module on the import path whose import writes a file."""
    marker = tmp_path / "pwned"
    (tmp_path / "pwnmod.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RLWEB_ENV_MODULES", raising=False)
    return marker


@pytest.mark.parametrize("env_id", ["pwnmod:CartPole-v1", "this:CartPole-v1", "trainer.__main__:CartPole-v1",
                                    "os:CartPole-v1"])
def test_an_id_that_names_a_module_is_refused_without_importing_it(pwnmod, env_id):
    for check in (check_env_id, make_env, env_spaces, lambda env_id: trainer.validate("dqn", env_id, {})):
        with pytest.raises(trainer.ConfigError, match="RLWEB_ENV_MODULES") as error:
            check(env_id)
        assert set(error.value.errors) == {"env_id"}
    assert not pwnmod.exists()
    assert "pwnmod" not in sys.modules and "this" not in sys.modules and "trainer.__main__" not in sys.modules


def test_a_module_the_admin_lists_may_register_envs(tmp_path, monkeypatch):
    (tmp_path / "rlweb_admin_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('RlwebAdminCartPole-v0', entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RLWEB_ENV_MODULES", "somethingelse, rlweb_admin_envs")
    assert trainer.validate("dqn", "rlweb_admin_envs:RlwebAdminCartPole-v0", {})["gamma"] == 0.99
    assert "rlweb_admin_envs" in sys.modules
    monkeypatch.setenv("RLWEB_ENV_MODULES", "somethingelse")
    with pytest.raises(trainer.ConfigError, match="RLWEB_ENV_MODULES"):
        check_env_id("rlweb_admin_envs:RlwebAdminCartPole-v0")


@pytest.mark.parametrize("env_id, message", [
    ("", "Give an environment id"),
    ("x" * 201, "at most 200"),
    ("CartPole-v1\n", "printable"),
    ("NoSuchEnv-v0", "Unknown environment id"),
    ("CartPole", "Did you mean CartPole-v1"),
    ("../../etc/passwd", "Unknown environment id"),
])
def test_ids_that_are_not_registered_are_refused_with_a_message(env_id, message):
    with pytest.raises(trainer.ConfigError, match=message):
        check_env_id(env_id)


@pytest.mark.parametrize("env_id", FORMERLY_FAILING)
def test_a_registered_id_that_cannot_be_made_here_is_refused_with_a_message(env_id):
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("dqn", env_id, {})
    assert error.value.errors["env_id"].startswith(f"'{env_id}'")
    assert env_id not in known_env_ids()


def test_atari_games_without_a_noop_action_are_made_without_random_no_ops():
    pytest.importorskip("ale_py")
    observation_space, action_space = env_spaces("ALE/Backgammon-v5")
    assert observation_space.shape == (4, 84, 84) and action_space.n == 3


def test_the_suggestions_leave_out_ids_whose_entry_point_cannot_work_here():
    suggested = known_env_ids()
    assert "CartPole-v1" in suggested and "Pendulum-v1" in suggested
    for env_id in ["Ant-v2", "Hopper-v3", "GymV21Environment-v0", "phys2d/CartPole-v0", "tabular/CliffWalking-v0",
                   "Pusher-v4"]:
        assert env_id in gym.registry and env_id not in suggested


def checked_ids() -> list[str]:
    """Every registered id but the Atari ones, which are every game once (its ALE/...-v5 id) and every variant of
    a few games (v0, v4, NoFrameskip; Backgammon has no NOOP action): the 352 Atari ids each load a ROM (0.16 s), and
    a game's variants differ only in the settings these cover."""
    known_env_ids()  # registers the Atari ids
    atari = {env_id: spec.kwargs.get("game") for env_id, spec in gym.registry.items()
             if str(spec.entry_point).startswith("ale_py")}
    every_variant = {"pong", "breakout", "backgammon"}
    return sorted(env_id for env_id in gym.registry
                  if env_id not in atari or env_id.startswith("ALE/") or atari[env_id] in every_variant)


@pytest.mark.slow
def test_every_registered_id_is_made_or_refused_with_a_config_error(capsys):
    """Every id in Gymnasium's registry (of Atari's, every game and every variant of three: `checked_ids`), through
    the form's check, for a discrete and a continuous algorithm."""
    made, refused = {"dqn": 0, "sac": 0}, {"dqn": 0, "sac": 0}
    env_ids = checked_ids()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for env_id in env_ids:
            for algorithm in ("dqn", "sac"):
                if algorithm == "sac" and env_id.startswith("ALE/"):
                    continue  # discrete actions: refused by the same check as every Atari id for dqn
                try:
                    trainer.validate(algorithm, env_id, {})
                    made[algorithm] += 1
                except trainer.ConfigError as error:
                    assert set(error.errors) <= {"env_id", "hidden_layers", "buffer_size"}, error.errors
                    refused[algorithm] += 1
    with capsys.disabled():
        print(f"\n{len(env_ids)} of {len(gym.registry)} registered ids; accepted {made}, refused {refused}; "
              f"{len(known_env_ids())} suggested")
    assert made["dqn"] > 100 and made["sac"] > 20


@pytest.mark.parametrize("env_id", ["Ant-v9", "Hopper-v", "phys2d/CartPole-v9", "GymV21Environment-v9"])
def test_did_you_mean_offers_only_ids_that_can_be_made_here(env_id):
    with pytest.raises(trainer.ConfigError) as error:
        check_env_id(env_id)
    message = error.value.errors["env_id"]
    offered = message.partition("Did you mean ")[2].rstrip("?").split(", ") if "Did you mean" in message else []
    assert all(suggestion in known_env_ids() for suggestion in offered), message
