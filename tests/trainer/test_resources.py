"""The memory a run would need is estimated from its config and refused, on the field responsible, before
anything is built or queued."""

import pytest
import torch

import trainer
from trainer.envs import env_spaces
from trainer.resources import estimate, max_run_bytes

ATARI = "ALE/Pong-v5"


def default_env(algorithm: str) -> str:
    spec = trainer.get_spec(algorithm)
    if algorithm == "qlearning":
        return "FrozenLake-v1"
    return "CartPole-v1" if "Discrete" in spec.action_spaces else "Pendulum-v1"


@pytest.mark.parametrize("algorithm", trainer.algorithm_names())
def test_defaults_are_accepted_for_every_algorithm(algorithm):
    trainer.validate(algorithm, default_env(algorithm), {})


def test_huge_hidden_layers_are_refused_on_hidden_layers():
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("dqn", "CartPole-v1", {"hidden_layers": "65536,65536"})
    assert set(error.value.errors) == {"hidden_layers"}
    assert "this run would need about 128.0 GiB of memory" in error.value.errors["hidden_layers"]


def test_a_50_million_transition_atari_buffer_is_refused_on_buffer_size():
    pytest.importorskip("ale_py")
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("dqn", ATARI, {"buffer_size": 50_000_000})
    assert set(error.value.errors) == {"buffer_size"}
    assert "GiB for stored experience" in error.value.errors["buffer_size"]


def test_atari_replay_counts_each_frame_once():
    pytest.importorskip("ale_py")
    spec = trainer.get_spec("dqn")
    observation_space, action_space = env_spaces(ATARI)
    result = estimate(spec, spec.build_config({"buffer_size": 100_000}), observation_space, action_space, ATARI)
    assert 7_000 * 100_000 < result.data_bytes < 7_300 * 100_000  # an 84x84 frame and a few numbers each


def test_the_network_estimate_counts_every_parameter_of_the_real_agent():
    agent = trainer.make("td3", "Pendulum-v1", hidden_layers="64,48", buffer_size=1000, batch_size=16)
    real = sum(tensor.numel() for module in agent.modules.values() for tensor in module.state_dict().values())
    spec = trainer.get_spec("td3")
    result = estimate(spec, agent.config, agent.observation_space, agent.action_space, "Pendulum-v1")
    assert result.network_numbers == real
    assert result.data_bytes == 1000 * (2 * 3 * 4 + 8 + 32)


def test_the_limit_follows_the_environment_variable(monkeypatch):
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "1")
    assert max_run_bytes() == 2**20
    with pytest.raises(trainer.ConfigError, match="more than the 1.0 MiB a run may use here") as error:
        trainer.validate("sac", "Pendulum-v1", {})
    assert set(error.value.errors) == {"buffer_size"}  # a million transitions outweigh the networks
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "0")
    assert max_run_bytes() > 2**28  # half this machine's memory


def test_loading_a_checkpoint_checks_the_estimate_before_building_the_agent(tmp_path, monkeypatch):
    agent = trainer.make("sac", "Pendulum-v1", hidden_layers="16", buffer_size=100_000, batch_size=16)
    path = agent.save(tmp_path / "sac.zip")
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "1")
    with pytest.raises(trainer.ConfigError, match="buffer_size"):
        trainer.load(path)
    monkeypatch.delenv("RLWEB_MAX_RUN_MEMORY_MB")
    assert torch.equal(trainer.load(path).actor.body[0].weight, agent.actor.body[0].weight)


def test_es_worker_processes_count_against_the_limit(monkeypatch):
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "2048")
    trainer.validate("es", "CartPole-v1", {"num_workers": 4})
    with pytest.raises(trainer.ConfigError, match="more than the 2.0 GiB") as error:
        trainer.validate("es", "CartPole-v1", {"num_workers": 1024, "num_agents": 2048})
    assert set(error.value.errors) == {"num_workers"}
