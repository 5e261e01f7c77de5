import json
import pickle
import zipfile

import numpy as np
import pytest
import torch

import trainer
from trainer.checkpoint import CheckpointError, read_checkpoint
from trainer.cpu_speed import FlatAdam
from trainer import runner as runner_module
from trainer.events import ListSink

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


def tampered_copy(path, tmp_path, edit) -> str:
    """A copy of the checkpoint at `path` whose config.json `edit` (a function of the config) changed."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        model = archive.read("model.safetensors")
    edit(config)
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(tampered, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.safetensors", model)
    return tampered


def test_it_refuses_a_checkpoint_with_out_of_bounds_hyperparameters(checkpoint, tmp_path):
    tampered = tampered_copy(checkpoint[1], tmp_path, lambda config: config["hyperparameters"].update(learning_rate=-1))
    with pytest.raises(trainer.ConfigError, match="learning_rate"):
        trainer.load(tampered)


def test_it_refuses_weights_that_do_not_fit_the_network(checkpoint, tmp_path):
    tampered = tampered_copy(checkpoint[1], tmp_path,
                             lambda config: config["hyperparameters"].update(hidden_layers="64"))
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



def test_a_resumed_run_s_clock_goes_on_from_its_checkpoint(tmp_path):
    """Event times are on the run's clock: a run resumed from a checkpoint (and a second learn() call)
    reports times after the checkpoint's, so a wall-time axis does not start again at 0."""
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    first = ListSink()
    agent.learn(200, sink=first, checkpoint_dir=tmp_path, eval_episodes=0)
    saved = next(e for e in first.events if e["kind"] == "checkpoint" and e["values"]["tag"] == "final")
    with zipfile.ZipFile(tmp_path / "final.zip") as archive:
        clock = json.loads(archive.read("config.json"))["seconds_trained"]
    assert clock > 0 and saved["time"] == pytest.approx(clock, abs=1e-3)
    assert agent.seconds_trained >= first.events[-1]["time"] - 1e-3

    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.seconds_trained == clock
    second = ListSink()
    summary = loaded.learn(100, sink=second, eval_episodes=0)
    times = [event["time"] for event in second.events]
    assert times[0] >= saved["time"] and times == sorted(times)
    finished = second.events[-1]
    assert finished["kind"] == "finished" and finished["values"]["seconds"] == summary["seconds"]
    assert summary["seconds"] < finished["time"] - clock + 1e-3  # the summary counts this attempt only

    third = ListSink()
    loaded.learn(50, sink=third, eval_episodes=0)
    assert third.events[0]["time"] >= finished["time"]


def test_a_checkpoint_without_a_clock_loads_with_it_at_zero(checkpoint, tmp_path):
    _, path = checkpoint
    with zipfile.ZipFile(path) as archive:
        config, model = json.loads(archive.read("config.json")), archive.read("model.safetensors")
    for value in (None, -5, "soon", float("nan")):  # absent (older checkpoints) or not a clock reading
        config["seconds_trained"] = value
        if value is None:
            del config["seconds_trained"]
        older = tmp_path / "older.zip"
        with zipfile.ZipFile(older, "w") as archive:
            archive.writestr("config.json", json.dumps(config))
            archive.writestr("model.safetensors", model)
        assert trainer.load(older).seconds_trained == 0.0

def per_parameter_lists(agent) -> list[list[torch.Tensor]]:
    """Each flat optimizer group's parameters, in the order the flat tensor concatenates them."""
    if agent.name == "sac":
        return [list(agent.actor.parameters()), list(agent.critic.parameters()), [agent.log_alpha.value]]
    if agent.name == "td3":
        return [list(agent.actor.parameters()), list(agent.critic.parameters())]
    return [list(agent.q_network.parameters())]


@pytest.mark.parametrize("algorithm", ["sac", "td3", "dqn"])
def test_optimizer_state_saved_per_parameter_loads_into_the_flat_optimizer(algorithm, tmp_path):
    """Checkpoints from before DQN, SAC and TD3 kept their parameters flat hold one Adam entry per
    parameter; loading concatenates them in the flat tensor's order."""
    agent = trainer.make(algorithm, "CartPole-v1" if algorithm == "dqn" else "Pendulum-v1", seed=0,
                         hidden_layers="16,16", batch_size=16, learning_starts=50, buffer_size=500)
    agent.learn(100)
    old_style = torch.optim.Adam([{"params": parameters, "lr": group["lr"]} for parameters, group
                                  in zip(per_parameter_lists(agent), agent.optimizers["optimizer"].param_groups)],
                                 fused=True)
    for group in old_style.param_groups:  # one step of what earlier versions ran
        for p in group["params"]:
            p.grad = torch.randn_like(p)
    old_style.step()
    agent.optimizers["optimizer"] = old_style
    path = agent.save(tmp_path / "old.zip")

    loaded = trainer.load(path)
    optimizer = loaded.optimizers["optimizer"]
    for old_group, new_group in zip(old_style.param_groups, optimizer.param_groups):
        (flat,) = new_group["params"]
        for slot in ("exp_avg", "exp_avg_sq"):
            expected = torch.cat([old_style.state[p][slot].reshape(-1) for p in old_group["params"]])
            torch.testing.assert_close(optimizer.state[flat][slot].reshape(-1), expected)
        assert float(optimizer.state[flat]["step"]) == 1.0
    loaded.learn(50)  # and it goes on learning


def optimizers_per_network(agent) -> list[tuple[torch.optim.Optimizer, torch.Tensor]]:
    """SAC's and TD3's optimizers with their flat parameter, in the order their checkpoints keep them."""
    pairs = [(agent.actor_optimizer, agent.actor_flat.param), (agent.critic_optimizer, agent.critic_flat.param)]
    return pairs + ([(agent.alpha_optimizer, agent.log_alpha.value)] if agent.name == "sac" else [])


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_sac_and_td3_checkpoints_from_their_single_optimizer_load_into_one_optimizer_per_network(algorithm,
                                                                                                 tmp_path):
    """Before SAC and TD3 stepped the critic first, one Adam held a group per network; their checkpoints
    keep that layout, so an old one's moments, step counts and learning rates go to the right optimizer."""
    agent = trainer.make(algorithm, "Pendulum-v1", seed=0, hidden_layers="16,16", batch_size=16,
                         learning_starts=50, buffer_size=500)
    agent.learn(100)
    parameters = [parameter for _, parameter in optimizers_per_network(agent)]
    learning_rates = [1e-3, 2e-3, 3e-3][:len(parameters)]
    single = FlatAdam([{"params": [p], "lr": lr} for p, lr in zip(parameters, learning_rates)])
    for _ in range(2):  # two steps of what earlier versions ran
        for p in parameters:
            p.grad = torch.randn_like(p)
        single.step()
    agent.optimizers["optimizer"] = single
    loaded = trainer.load(agent.save(tmp_path / "old.zip"))

    for (optimizer, parameter), old, learning_rate in zip(optimizers_per_network(loaded), parameters,
                                                          learning_rates):
        (group,) = optimizer.param_groups
        assert group["lr"] == learning_rate and group["params"][0] is parameter
        for slot in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(optimizer.state[parameter][slot], single.state[old][slot])
    loaded.learn(50)  # it goes on learning, and its own checkpoint round-trips
    again = trainer.load(loaded.save(tmp_path / "new.zip"))
    for (optimizer, parameter), (reloaded, same) in zip(optimizers_per_network(loaded), optimizers_per_network(again)):
        assert float(optimizer.state[parameter]["step"]) > 2.0
        for slot in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(reloaded.state[same][slot], optimizer.state[parameter][slot])


def test_it_refuses_optimizer_state_that_fits_no_layout(checkpoint, tmp_path):
    def one_group_too_many(config: dict) -> None:
        groups = config["optimizers"]["optimizer"]
        groups.append(dict(groups[0]))

    tampered = tampered_copy(checkpoint[1], tmp_path, one_group_too_many)
    with pytest.raises(CheckpointError, match="optimizer state does not fit"):
        trainer.load(tampered)


def test_an_evaluation_a_stop_interrupted_is_done_first_when_the_run_resumes(tmp_path, monkeypatch):
    """A cancel that lands during the periodic evaluation at step 200 ends the run at 200 with no evaluation
    reported there; the checkpoint says one is due, and the resumed run reports it at 200 before it trains
    on, so the history holds one evaluation every eval_interval steps (none lost at the resume)."""
    monkeypatch.setattr(runner_module, "STOP_POLL_SECONDS", 0.0)  # the stop is seen at once, inside the evaluation
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    first = ListSink(stop_after=200)  # the train event at 200 comes just before the evaluation at 200
    summary = agent.learn(1_000, sink=first, eval_interval=200, eval_episodes=2, log_interval=100,
                          checkpoint_dir=tmp_path)
    assert summary["status"] == "cancelled" and summary["steps"] == 200
    assert first.of_kind("eval") == [] and agent.eval_due

    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.eval_due and loaded.steps_done == 200
    second = ListSink()
    summary = loaded.learn(0, sink=second, end_step=600, eval_interval=200, eval_episodes=2)
    assert summary["status"] == "succeeded"
    assert [event["step"] for event in second.of_kind("eval")] == [200, 400, 600]
    assert [event["kind"] for event in second.events[:2]] == ["started", "eval"] and not loaded.eval_due
