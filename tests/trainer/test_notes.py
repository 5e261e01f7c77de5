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


def test_an_epsilon_schedule_that_ends_before_learning_starts_is_said_so():
    agent = trainer.make("dqn", "CartPole-v1", learning_starts=1_000, exploration_fraction=0.1,
                         exploration_final_eps=0.05)
    assert run_notes(agent.config, agent.observation_space, 5_000) == [
        "Epsilon reaches exploration_final_eps=0.05 at step 500 (exploration_fraction=0.1 of 5,000 steps), before "
        "learning starts at step 1,000: once it learns, the agent explores with that epsilon only. A larger "
        "exploration_fraction keeps epsilon decaying while it learns."]
    assert run_notes(agent.config, agent.observation_space, 20_000) == []  # it decays until step 2,000
    assert run_notes(agent.config, agent.observation_space) == []  # no length given: nothing to say
    noisy = trainer.make("noisy-dqn", "CartPole-v1", learning_starts=1_000, exploration_fraction=0.1)
    assert run_notes(noisy.config, noisy.observation_space, 5_000) == []  # it has no epsilon


def test_hidden_layers_behind_the_nature_cnn_get_a_warning():
    assert "behind the Nature CNN" in notes_of("dqn", "ALE/Pong-v5", hidden_layers="256,256", buffer_size=1000)[0]
    assert notes_of("dqn", "ALE/Pong-v5", hidden_layers="none", buffer_size=1000) == []


def test_the_runs_started_event_carries_its_notes():
    sink = ListSink()
    trainer.make("dqn", "CartPole-v1", learning_starts=0, batch_size=32, hidden_layers="8").learn(
        64, sink=sink, eval_episodes=0)
    started = next(event for event in sink.events if event["kind"] == "started")
    assert started["values"]["notes"] == [  # the second one knows the run's length: 64 steps
        "learning_starts=0 is below batch_size=32: learning starts once the replay holds 32 transitions.",
        "Epsilon reaches exploration_final_eps=0.04 at step 10 (exploration_fraction=0.16 of 64 steps), before "
        "learning starts at step 32: once it learns, the agent explores with that epsilon only. A larger "
        "exploration_fraction keeps epsilon decaying while it learns."]


def test_the_command_line_prints_them_before_training(tmp_path, capsys):
    assert main(["train", "ppo", "CartPole-v1", "--total-steps", "64", "--out", str(tmp_path), "--preset", "none",
                 "--set", "n_steps=8", "--set", "batch_size=16"]) == 0
    err = capsys.readouterr().err
    assert "note: The learning rate decays linearly to 0 over the run from learning_rate=0.001" in err
