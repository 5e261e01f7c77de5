"""Training errors end the run `failed` with a clear message and the traceback, and never overwrite the last
good checkpoint: a NaN or infinite loss, an env that raises, memory running out. Checkpoint and video writes
that fail are reported as events; a periodic one does not end the run, the final one does."""

import math

import pytest
import torch

import tests.trainer.envs_for_tests  # noqa: F401  (registers the corridor envs)
import trainer
from trainer.events import ListSink
from trainer.runner import TrainingError

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")  # NaN rewards, on purpose

DQN = {"learning_starts": 50, "batch_size": 16, "buffer_size": 500, "hidden_layers": "16", "train_frequency": 4,
       "gradient_steps": 1}
SETTINGS = {"dqn": DQN, "ppo": {"n_steps": 32, "num_envs": 1, "batch_size": 16, "n_epochs": 2},
            "a2c": {"n_steps": 8, "num_envs": 1}, "reinforce": {"episodes_per_batch": 2},
            "qlearning": {}}
OBSERVATIONS = {"qlearning": "discrete"}


def train_until_failure(algorithm, fault, tmp_path):
    """Train on a corridor that goes wrong at step 300, with a checkpoint every 100 steps: the error raised,
    the events, and the folder."""
    env_id = f"rlweb-test/Faulty-{fault}-{OBSERVATIONS.get(algorithm, 'box')}-v0"
    agent = trainer.make(algorithm, env_id, seed=0, device="cpu", **SETTINGS[algorithm])
    sink = ListSink()
    with pytest.raises(TrainingError) as raised:
        agent.learn(5_000, sink=sink, eval_episodes=0, checkpoint_interval=100, checkpoint_dir=tmp_path)
    return raised.value, sink


def assert_failed_clearly(error, sink, tmp_path, *words):
    failed = sink.of_kind("failed")
    assert len(failed) == 1 and not sink.of_kind("finished")
    assert failed[0]["values"]["error"] == str(error)
    for word in words:
        assert word in str(error)
    assert "Traceback (most recent call last)" in failed[0]["values"]["traceback"]
    # the last good checkpoints stay, none was written after the error, none holds broken weights
    saved = sorted(path.name for path in tmp_path.glob("*.zip"))
    assert saved and "final.zip" not in saved and all(name.startswith("step_") for name in saved)
    for path in tmp_path.glob("*.zip"):
        agent = trainer.load(path, device="cpu")
        assert agent.steps_done <= failed[0]["step"]
        assert all(torch.isfinite(p).all() for module in agent.modules.values() for p in module.parameters())
    assert not list(tmp_path.glob(".checkpoint-*"))


@pytest.mark.parametrize("algorithm", sorted(SETTINGS))
@pytest.mark.parametrize("fault", ["nan", "inf"])
def test_a_loss_that_becomes_nan_or_infinite_fails_the_run_and_keeps_the_last_good_checkpoint(algorithm, fault,
                                                                                              tmp_path):
    error, sink = train_until_failure(algorithm, fault, tmp_path)
    assert_failed_clearly(error, sink, tmp_path, "became", "lower the learning rate")
    assert str(error).startswith("the loss became ") and "at step " in str(error)
    assert sink.of_kind("failed")[0]["step"] >= 299  # the corridor went wrong at its 300th step


def test_huge_rewards_that_blow_the_loss_up_fail_the_run_with_a_clear_message(tmp_path):
    error, sink = train_until_failure("ppo", "huge", tmp_path)
    assert_failed_clearly(error, sink, tmp_path, "lower the learning rate")


def test_weights_that_are_nan_are_never_saved(tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **{**DQN, "learning_starts": 10_000})
    with torch.no_grad():
        next(agent.q_network.parameters()).fill_(math.nan)
    sink = ListSink()
    with pytest.raises(TrainingError, match="the weights became NaN or infinite at step 100"):
        agent.learn(100, sink=sink, eval_episodes=0, checkpoint_dir=tmp_path)
    assert not list(tmp_path.iterdir()) and sink.of_kind("failed")


@pytest.mark.parametrize("algorithm", ["dqn", "ppo"])
def test_an_env_that_raises_fails_the_run_with_what_it_said(algorithm, tmp_path):
    error, sink = train_until_failure(algorithm, "raise", tmp_path)
    assert_failed_clearly(error, sink, tmp_path, "the environment rlweb-test/Faulty-raise-box-v0 raised "
                                                 "RuntimeError at step 299", "the simulator crashed")
    assert "the simulator crashed" in sink.of_kind("failed")[0]["values"]["traceback"]
    assert isinstance(error.__cause__, RuntimeError)


@pytest.mark.parametrize("fault, kind", [("memory", "MemoryError"), ("cuda-memory", "OutOfMemoryError")])
def test_running_out_of_memory_fails_the_run_with_advice(fault, kind, tmp_path):
    error, sink = train_until_failure("dqn", fault, tmp_path)
    assert_failed_clearly(error, sink, tmp_path, "out of memory at step 299", kind, "buffer_size")


def blocked_folder(tmp_path):
    """A folder that cannot be made: its parent is a file (a full disk or missing permission look the same
    to the runner: an OSError from the write)."""
    (tmp_path / "file").write_text("not a folder")
    return tmp_path / "file" / "checkpoints"


class FreesTheDiskAfterTheFirstError(ListSink):
    def __init__(self, blocker):
        super().__init__()
        self.blocker = blocker

    def emit(self, event):
        super().emit(event)
        if event["values"].get("error") and self.blocker.is_file():
            self.blocker.unlink()


def test_a_periodic_checkpoint_that_cannot_be_written_is_reported_and_the_run_goes_on(tmp_path):
    folder = blocked_folder(tmp_path)
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **DQN)
    sink = FreesTheDiskAfterTheFirstError(tmp_path / "file")
    summary = agent.learn(300, sink=sink, eval_episodes=0, checkpoint_interval=100, checkpoint_dir=folder)
    assert summary["status"] == "succeeded"
    checkpoints = [event["values"] for event in sink.of_kind("checkpoint")]
    assert checkpoints[0]["tag"] == "periodic" and checkpoints[0]["step"] == 100 and "path" not in checkpoints[0]
    assert checkpoints[0]["error"].startswith("the periodic checkpoint could not be written: ")
    assert [(c["tag"], c["step"]) for c in checkpoints[1:]] == [("periodic", 200), ("final", 300)]
    assert sorted(path.name for path in folder.iterdir()) == ["final.zip", "step_200.zip"]


def test_a_final_checkpoint_that_cannot_be_written_fails_the_run(tmp_path):
    folder = blocked_folder(tmp_path)
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **DQN)
    sink = ListSink()
    with pytest.raises(TrainingError, match="the final checkpoint could not be written: "):
        agent.learn(100, sink=sink, eval_episodes=0, checkpoint_dir=folder)
    assert sink.of_kind("checkpoint")[-1]["values"]["tag"] == "final"
    assert "error" in sink.of_kind("checkpoint")[-1]["values"]
    assert sink.of_kind("failed")[0]["values"]["error"].startswith("the final checkpoint could not be written")
    assert not sink.of_kind("finished")


@pytest.mark.slow
def test_a_video_that_cannot_be_written_is_reported_and_the_run_goes_on(tmp_path):
    folder = blocked_folder(tmp_path)
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **DQN)
    sink = ListSink()
    summary = agent.learn(200, sink=sink, eval_episodes=0, video_interval=100, video_dir=folder,
                          checkpoint_dir=tmp_path / "checkpoints")
    assert summary["status"] == "succeeded"
    videos = [event["values"] for event in sink.of_kind("video")]
    assert [(video["step"], "path" in video) for video in videos] == [(100, False), (200, False)]
    assert all(video["error"].startswith("The video could not be written: ") for video in videos)


@pytest.mark.slow
def test_videos_are_written_under_a_temporary_name_then_renamed(tmp_path, monkeypatch):
    import trainer.video

    names = []
    original = trainer.video.os.replace
    monkeypatch.setattr(trainer.video.os, "replace", lambda source, target: names.append((source, target))
                        or original(source, target))
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **DQN)
    agent.learn(100, eval_episodes=0, video_interval=100, video_dir=tmp_path)
    assert [str(target) for _, target in names] == [str(tmp_path / "video_step_100.mp4")]
    assert names[0][0].startswith(str(tmp_path / ".video-"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["video_step_100.mp4"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device machine)")
@pytest.mark.parametrize("algorithm", ["dqn", "ppo"])
def test_a_loss_that_becomes_nan_on_a_gpu_fails_the_run_before_a_checkpoint_holds_it(algorithm, tmp_path):
    """On a GPU the losses are summed on the device and read at the next report (runner.record); the run
    still fails, at that report or at the next checkpoint's look at the weights, whichever comes first."""
    env_id = f"rlweb-test/Faulty-nan-{OBSERVATIONS.get(algorithm, 'box')}-v0"
    agent = trainer.make(algorithm, env_id, seed=0, device="cuda", **SETTINGS[algorithm])
    sink = ListSink()
    with pytest.raises(TrainingError) as raised:
        agent.learn(5_000, sink=sink, eval_episodes=0, checkpoint_interval=100, checkpoint_dir=tmp_path)
    assert_failed_clearly(raised.value, sink, tmp_path, "became", "lower the learning rate")
    assert sink.of_kind("failed")[0]["step"] >= 299
