"""Plugins: algorithms from installed packages' `rlweb.algorithms` entry points (ours too), environments from
`gymnasium.envs` ones, broken plugins kept aside, and the package a run or checkpoint needs (docs/plugins.md).

The example package (examples/plugin) must be installed: `.venv/bin/pip install -e examples/plugin --no-deps`."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import zipfile

import pytest

import trainer
from tests.plugin_fixtures import (BROKEN_PACKAGE, EXAMPLE, EXAMPLE_ENV, broken_plugins,  # noqa: F401 (a fixture)
                                    needs_example_plugin)
from trainer import registry
from trainer.envs import check_env_id, known_env_ids, make_env

TINY = {"learning_starts": 20, "batch_size": 8, "buffer_size": 200, "hidden_layers": "16"}

pytestmark = needs_example_plugin


def broken_error(name: str) -> str:
    return {broken.name: broken.error for broken in trainer.broken_algorithms()}[name]


def trainer_command(*args, path: str = "") -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": path} if path else {}
    import os
    return subprocess.run([sys.executable, "-m", "trainer", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_built_in_algorithms_are_exactly_rlwebs_own_entry_points():
    declared = {ep.name for ep in registry.algorithm_entry_points() if registry.origin_of(ep).builtin}
    ours = {name for name in trainer.algorithm_names() if trainer.origin(name).builtin}
    assert "dqn" in declared and "r2d1" in declared
    assert ours == declared  # no algorithm reaches the registry another way


def test_the_built_ins_are_found_from_pyproject_when_rlweb_has_no_metadata(monkeypatch):
    plugins_only = [ep for ep in importlib.metadata.entry_points(group=registry.ENTRY_POINT_GROUP)
                    if not registry.origin_of(ep).builtin]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: plugins_only)
    found = {ep.name: registry.origin_of(ep) for ep in registry.algorithm_entry_points()}
    assert found["ppo"] == registry.Origin("rlweb", trainer.__version__)
    assert found["soft-dqn"].package == EXAMPLE


def test_list_shows_each_algorithm_with_its_package_and_version():
    result = trainer_command("list")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert rows["dqn"] == ["rlweb", trainer.__version__]
    assert rows["soft-dqn"] == [EXAMPLE, importlib.metadata.version(EXAMPLE)]


def test_the_example_algorithm_is_validated_like_a_built_in_and_names_its_package():
    values = trainer.validate("soft-dqn", EXAMPLE_ENV, {"temperature": "0.1"})
    assert values["temperature"] == 0.1 and values["plugin"] == f"{EXAMPLE} {importlib.metadata.version(EXAMPLE)}"
    with pytest.raises(trainer.ConfigError) as refused:
        trainer.validate("soft-dqn", EXAMPLE_ENV, {"temperature": "0"})
    assert set(refused.value.errors) == {"temperature"}
    with pytest.raises(trainer.ConfigError) as refused:  # its own check, beside DQN's
        trainer.validate("soft-dqn", EXAMPLE_ENV, {"categorical": True})
    assert "return distribution" in refused.value.errors["categorical"]
    with pytest.raises(trainer.ConfigError) as refused:
        trainer.validate("soft-dqn", "Pendulum-v1", {})
    assert "Discrete" in refused.value.errors["env_id"]


def test_the_example_environment_comes_from_its_gymnasium_entry_point():
    assert EXAMPLE_ENV in known_env_ids()
    check_env_id(EXAMPLE_ENV)
    env = make_env(EXAMPLE_ENV)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (8,)
    env.close()


def test_the_example_algorithm_trains_saves_its_package_and_loads_again(tmp_path):
    agent = trainer.make("soft-dqn", EXAMPLE_ENV, seed=3, **TINY)
    summary = agent.learn(200, eval_interval=100, eval_episodes=2)
    assert summary["status"] == "succeeded"
    path = agent.save(tmp_path / "soft.zip")
    with zipfile.ZipFile(path) as archive:
        assert json.loads(archive.read("config.json"))["plugin"] == f"{EXAMPLE} {importlib.metadata.version(EXAMPLE)}"
    loaded = trainer.load(path)
    observations = [make_env(EXAMPLE_ENV).reset(seed=seed)[0] for seed in range(3)]
    assert [loaded.predict(o) for o in observations] == [agent.predict(o) for o in observations]
    result = trainer_command("eval", str(path), "--episodes", "2")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["episodes"] == 2


def with_plugin(path, tmp_path, plugin: str, algorithm: str = "soft-dqn"):
    """A copy of the checkpoint at `path` whose config.json says it needs `plugin` for `algorithm`."""
    copy = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}.zip"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(copy, "w") as target:
        for member in source.namelist():
            data = source.read(member)
            if member == "config.json":
                data = json.dumps({**json.loads(data), "plugin": plugin, "algorithm": algorithm}).encode()
            target.writestr(member, data)
    return copy


def test_a_checkpoint_of_a_missing_or_incompatible_plugin_is_refused_naming_the_package(tmp_path):
    agent = trainer.make("soft-dqn", EXAMPLE_ENV, seed=0, **TINY)
    path = agent.save(tmp_path / "soft.zip")
    missing = with_plugin(path, tmp_path, "rlweb-gone-plugin 2.1.0", algorithm="gone-dqn")
    with pytest.raises(trainer.CheckpointError, match="rlweb-gone-plugin 2.1.0, which is not installed here"):
        trainer.load(missing)
    result = trainer_command("eval", str(missing))
    assert result.returncode == 2 and "rlweb-gone-plugin" in result.stderr
    with pytest.raises(trainer.CheckpointError, match=f"{EXAMPLE} 7.x .*a different major version"):
        trainer.load(with_plugin(path, tmp_path, f"{EXAMPLE} 7.0.0"))
    assert trainer.load(with_plugin(path, tmp_path, f"{EXAMPLE} 0.9.4")).name == "soft-dqn"  # same major: loads


def test_a_run_made_with_a_package_this_machine_lacks_fails_at_once_naming_it():
    with pytest.raises(trainer.TrainingError, match="rlweb-gone-plugin 1.0.0, which is not installed here"):
        trainer.make("gone-dqn", EXAMPLE_ENV, plugin="rlweb-gone-plugin 1.0.0")
    with pytest.raises(trainer.TrainingError, match=f"needs the package {EXAMPLE} 0.2.0"):
        trainer.make("soft-dqn", EXAMPLE_ENV, plugin=f"{EXAMPLE} 0.2.0", **TINY)
    version = importlib.metadata.version(EXAMPLE)
    assert trainer.make("soft-dqn", EXAMPLE_ENV, plugin=f"{EXAMPLE} {version}", **TINY).name == "soft-dqn"


def test_a_plugin_that_raises_on_import_is_listed_broken_and_the_others_still_work(broken_plugins):
    assert "import-error" not in trainer.algorithm_names()
    assert "ImportError" in broken_error("import-error") and "nowhere" in broken_error("import-error")
    with pytest.raises(trainer.ConfigError, match="It is broken"):
        trainer.get_spec("import-error")
    assert {"dqn", "soft-dqn", "crashing"} <= set(trainer.algorithm_names())


def test_a_plugin_whose_config_cannot_be_built_is_listed_broken(broken_plugins):
    assert "bad-config" not in trainer.algorithm_names()
    assert "default of config field 'layers'" in broken_error("bad-config")


def test_a_plugin_that_crashes_in_train_raises_from_learn_and_the_next_agent_trains(broken_plugins):
    with pytest.raises(RuntimeError, match="failed on purpose"):
        trainer.make("crashing", "CartPole-v1").learn(50)
    assert trainer.make("dqn", "CartPole-v1", **TINY).learn(50)["status"] == "succeeded"


def test_the_cli_lists_broken_plugins_with_their_errors(broken_plugins):
    result = trainer_command("list", path=str(broken_plugins))
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert f"{BROKEN_PACKAGE} 1.0.0  BROKEN: ImportError" in lines["import-error"]
    assert "BROKEN" in lines["bad-config"] and "BROKEN" not in lines["crashing"] and "BROKEN" not in lines["dqn"]
