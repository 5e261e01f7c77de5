"""Nothing changes silently: the values a run adjusts or schedules on its own, and settings that rarely fit
together, are said in words (trainer/notes.py) before training, on the command line and in the run's log."""

import trainer
from trainer.cli import main
from trainer.events import ListSink
from trainer.notes import run_notes


def notes_of(algorithm, env_id="CartPole-v1", **hyperparameters):
    agent = trainer.make(algorithm, env_id, **hyperparameters)
    return run_notes(agent.config, agent.observation_space)


def test_a_learning_start_below_the_batch_size_is_said_to_be_raised():
    assert notes_of("dqn", learning_starts=0, batch_size=64) == [
        "learning_starts=0 is below batch_size=64: learning starts once the replay holds 64 transitions."]
    assert notes_of("dqn", learning_starts=100, batch_size=64) == []


def test_a_decaying_learning_rate_and_clip_range_are_said_so():
    notes = notes_of("ppo", learning_rate=3e-4)
    assert notes[0] == ("The learning rate decays linearly to 0 over the run from learning_rate=0.0003 "
                        "(lr_schedule=linear; lr_schedule=constant keeps it).")
    assert notes[1].startswith("clip_range decays linearly to 0 over the run from 0.2")
    assert notes_of("ppo", lr_schedule="constant", clip_schedule="constant") == []
    assert "critic_learning_rate=0.001" in notes_of("td3", "Pendulum-v1", lr_schedule="linear")[0]


def test_hidden_layers_behind_the_nature_cnn_get_a_warning():
    assert "behind the Nature CNN" in notes_of("dqn", "ALE/Pong-v5", hidden_layers="256,256", buffer_size=1000)[0]
    assert notes_of("dqn", "ALE/Pong-v5", hidden_layers="none", buffer_size=1000) == []


def test_the_runs_started_event_carries_its_notes():
    sink = ListSink()
    trainer.make("dqn", "CartPole-v1", learning_starts=0, batch_size=32, hidden_layers="8").learn(
        64, sink=sink, eval_episodes=0)
    started = next(event for event in sink.events if event["kind"] == "started")
    assert started["values"]["notes"] == [
        "learning_starts=0 is below batch_size=32: learning starts once the replay holds 32 transitions."]


def test_the_command_line_prints_them_before_training(tmp_path, capsys):
    assert main(["train", "ppo", "CartPole-v1", "--total-steps", "64", "--out", str(tmp_path), "--preset", "none",
                 "--set", "n_steps=8", "--set", "batch_size=16"]) == 0
    err = capsys.readouterr().err
    assert "note: The learning rate decays linearly to 0 over the run from learning_rate=0.001" in err
