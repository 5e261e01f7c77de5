import json
import pickle
import zipfile

import numpy as np
import pytest
import torch

import trainer
from trainer.checkpoint import CheckpointError, read_checkpoint

TINY = dict(learning_starts=50, batch_size=16, buffer_size=1000, train_frequency=4, gradient_steps=1,
            hidden_layers="32,32")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    agent.learn(200)
    return agent, agent.save(tmp_path_factory.mktemp("ckpt") / "final.zip")


def test_a_checkpoint_is_a_zip_of_config_json_and_safetensors(checkpoint):
    _, path = checkpoint
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == ["config.json", "model.safetensors"]
        config = json.loads(archive.read("config.json"))
    assert config["algorithm"] == "dqn" and config["env_id"] == "CartPole-v1" and config["step"] == 200
    assert config["hyperparameters"]["hidden_layers"] == "32,32"
    assert config["observation_space"]["type"] == "Box" and config["action_space"] == {
        "type": "Discrete", "n": 2, "start": 0}
    assert config["library_version"] == trainer.__version__


def test_save_then_load_gives_the_same_actions_and_optimizer_state(checkpoint):
    agent, path = checkpoint
    loaded = trainer.load(path)
    observations = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    assert (agent.act(observations, True) == loaded.act(observations, True)).all()
    for name in ("exp_avg", "exp_avg_sq"):
        original = agent.optimizer.state_dict()["state"][0][name]
        assert torch.equal(original, loaded.optimizer.state_dict()["state"][0][name])


def test_loading_runs_no_code_from_a_pickled_payload(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps({"format": "rlweb-checkpoint", "algorithm": "dqn"}))
        archive.writestr("model.safetensors", pickle.dumps(Exploit()))
    with pytest.raises(CheckpointError):
        trainer.load(path)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("content, message", [
    (b"not a zip", "not a checkpoint zip"),
])
def test_it_refuses_files_that_are_not_checkpoints(tmp_path, content, message):
    path = tmp_path / "bad.zip"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)


def test_it_refuses_a_checkpoint_with_out_of_bounds_hyperparameters(checkpoint, tmp_path):
    _, path = checkpoint
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        model = archive.read("model.safetensors")
    config["hyperparameters"]["learning_rate"] = -1
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(tampered, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.safetensors", model)
    with pytest.raises(trainer.ConfigError, match="learning_rate"):
        trainer.load(tampered)


def test_it_refuses_weights_that_do_not_fit_the_network(checkpoint, tmp_path):
    _, path = checkpoint
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        model = archive.read("model.safetensors")
    config["hyperparameters"]["hidden_layers"] = "64"
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(tampered, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.safetensors", model)
    with pytest.raises(CheckpointError, match="do not fit"):
        trainer.load(tampered)


def test_a_loaded_agent_can_go_on_learning(checkpoint):
    _, path = checkpoint
    loaded = trainer.load(path)
    summary = loaded.learn(100)
    assert summary["steps"] == 300


def test_a_resumed_run_keeps_its_best_evaluation_and_best_checkpoint(tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", seed=0, learning_starts=50, batch_size=16, buffer_size=500)
    agent.learn(200, checkpoint_dir=tmp_path, eval_episodes=2)
    best = agent.best_eval_return
    assert best is not None and (tmp_path / "best.zip").exists()
    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.best_eval_return == best
    loaded.best_eval_return = best = 10_000.0  # no evaluation can beat this
    best_file = (tmp_path / "best.zip").read_bytes()
    summary = loaded.learn(100, checkpoint_dir=tmp_path, eval_episodes=2)
    assert summary["best_eval_return"] == best and summary["eval_return_mean"] < best
    assert (tmp_path / "best.zip").read_bytes() == best_file
