"""What made a run (trainer/provenance.py): the commit of a real git checkout and its dirty flag, the versions and
machine, the checkpoint that carries the record, and the repeat command, which trains the same run again."""

import importlib.metadata
import json
import shlex
import subprocess

import pytest
import torch

import trainer
from trainer import cli, provenance
from trainer.checkpoint import read_checkpoint

TINY = {"learning_starts": 50, "batch_size": 16, "buffer_size": 500, "train_frequency": 4, "gradient_steps": 1,
        "target_update_interval": 50, "hidden_layers": "16,16", "learning_rate": 0.000731, "double_q": True,
        "exploration_final_eps": 0.1}
OPTIONS = {"eval_interval": 100, "eval_episodes": 1, "checkpoint_interval": 0, "video_interval": 0}


def git(folder, *arguments):
    subprocess.run(["git", "-C", str(folder), *arguments], check=True, capture_output=True, timeout=30)


@pytest.fixture
def checkout(tmp_path):
    """A real git repository with one commit."""
    folder = tmp_path / "checkout"
    folder.mkdir()
    git(folder, "init", "-q")
    (folder / "code.py").write_text("x = 1\n")
    git(folder, "add", "code.py")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
    return folder


def test_a_clean_checkout_gives_its_commit_and_no_changes(checkout):
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert provenance.source_commit(checkout) == (head, False)


def test_a_changed_tracked_file_flags_the_tree_dirty_and_an_untracked_one_does_not(checkout):
    (checkout / "new.py").write_text("y = 2\n")
    assert provenance.source_commit(checkout)[1] is False
    (checkout / "code.py").write_text("x = 2\n")
    assert provenance.source_commit(checkout)[1] is True


def test_no_commit_outside_a_checkout_inside_another_one_or_without_git(checkout, tmp_path, monkeypatch):
    assert provenance.source_commit(tmp_path / "nowhere") == (None, None)
    inner = checkout / "site-packages"  # an installed copy inside some other repository is not that repository
    inner.mkdir()
    assert provenance.source_commit(inner) == (None, None)
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert provenance.source_commit(checkout) == (None, None)


def test_the_record_names_the_versions_machine_and_seed():
    agent = trainer.make("dqn", "CartPole-v1", seed=7, device="cpu", **TINY)
    record = provenance.collect(agent, total_steps=300, out="here", **OPTIONS)
    assert record["torch"] == torch.__version__ and record["cuda"] == torch.version.cuda
    assert record["gymnasium"] == importlib.metadata.version("gymnasium")
    assert record["ale_py"] == importlib.metadata.version("ale-py")
    assert record["mujoco"] == importlib.metadata.version("mujoco")
    assert record["rlweb_version"] == importlib.metadata.version("rlweb")
    assert record["seed"] == 7 and record["device"] == "cpu" and record["threads"] == torch.get_num_threads()
    assert record["host"] and record["cpu"] and record["python"].count(".") == 2
    assert record["gpu"] is None  # on the CPU
    if (provenance.SOURCE_ROOT / ".git").exists():  # run from the repository's checkout: its commit is known
        assert len(record["rlweb_commit"]) == 40 and isinstance(record["rlweb_dirty"], bool)
    assert [name for name, _, _ in provenance.rows(record)] == [name for name in provenance.LABELS if name in record]


def test_the_command_names_every_hyperparameter_so_that_the_cli_makes_the_same_config():
    agent = trainer.make("dqn", "CartPole-v1", seed=3, device="cpu", preset="auto", **TINY)
    words = shlex.split(provenance.collect(agent, total_steps=300, out="a folder", **OPTIONS)["command"])
    assert words[:6] == ["python", "-m", "trainer", "train", "dqn", "CartPole-v1"]
    assert words[-2:] == ["--out", "a folder"] and words[words.index("--preset") + 1] == "none"
    sets = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--set")
    assert set(sets) == set(agent.hyperparameters())
    again = trainer.make("dqn", "CartPole-v1", seed=3, device="cpu", **sets)
    assert again.hyperparameters() == agent.hyperparameters()


def test_the_repeat_command_trains_the_same_weights_and_the_checkpoint_carries_the_record(tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", seed=5, device="cpu", **TINY)
    agent.environment = provenance.collect(agent, total_steps=300, out=tmp_path / "first", **OPTIONS)
    agent.learn(300, checkpoint_dir=tmp_path / "first", **OPTIONS)
    first, first_weights = read_checkpoint(tmp_path / "first" / "final.zip")
    assert first["environment"] == agent.environment
    assert trainer.load(tmp_path / "first" / "final.zip").environment == agent.environment

    words = shlex.split(agent.environment["command"])
    words[words.index("--out") + 1] = str(tmp_path / "again")
    assert cli.main(words[3:]) == 0  # what `python -m trainer` runs with these arguments

    again, again_weights = read_checkpoint(tmp_path / "again" / "final.zip")
    assert (again["algorithm"], again["env_id"], again["seed"], again["step"]) == ("dqn", "CartPole-v1", 5, 300)
    assert again["hyperparameters"] == first["hyperparameters"]
    assert again["environment"]["command"] == shlex.join(words)  # the CLI records its own, the same command
    assert again_weights.keys() == first_weights.keys()
    assert all(torch.equal(again_weights[name], first_weights[name]) for name in first_weights)


def test_a_run_without_evaluations_repeats_too(tmp_path):
    """The web form allows 0 evaluation episodes (no evaluation): the command says so, and the CLI takes it."""
    agent = trainer.make("dqn", "CartPole-v1", seed=2, device="cpu", **TINY)
    command = provenance.collect(agent, total_steps=100, out=tmp_path, eval_episodes=0)["command"]
    assert cli.main(shlex.split(command)[3:]) == 0
    config, _ = read_checkpoint(tmp_path / "final.zip")
    assert config["step"] == 100 and config["hyperparameters"] == agent.hyperparameters()
    kinds = {json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()}
    assert "finished" in kinds and "eval" not in kinds
