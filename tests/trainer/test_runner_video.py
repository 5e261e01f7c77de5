"""Episode videos from the runner: every `video_interval` env steps and at the end, one greedy episode is
written as an H.264 mp4 and reported as a `video` event; an env that cannot render is reported once and
the run goes on."""

import json
import subprocess
import sys

import imageio.v2 as imageio
import pytest

import tests.trainer.envs_for_tests  # noqa: F401  (registers the corridor envs, which do not render)
import trainer
from trainer.events import ListSink

TINY = {"learning_starts": 50, "batch_size": 16, "buffer_size": 500, "hidden_layers": "16"}


def test_videos_are_real_mp4s_of_whole_episodes(tmp_path):
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    sink = ListSink()
    summary = agent.learn(250, sink=sink, eval_episodes=0, video_interval=100, video_dir=tmp_path)
    assert summary["status"] == "succeeded"
    videos = [event["values"] for event in sink.of_kind("video")]
    assert [video["step"] for video in videos] == [100, 200, 250]  # each interval, then the end
    for video in videos:
        assert video["path"] == str(tmp_path / f"video_step_{video['step']}.mp4")
        reader = imageio.get_reader(video["path"])
        frames = [frame for frame in reader]
        assert reader.get_meta_data()["codec"] == "h264" and reader.get_meta_data()["fps"] == 50
        assert len(frames) == video["length"] + 1  # the first observation, then one frame per step
        assert frames[0].shape == (400, 600, 3) and frames[0].std() > 0
        assert video["episode_return"] == video["length"]  # CartPole: reward 1 per step


def test_an_env_that_cannot_render_is_reported_once_and_the_run_succeeds(tmp_path):
    agent = trainer.make("dqn", "rlweb-test/Corridor-box-v0", seed=0, **TINY)
    sink = ListSink()
    summary = agent.learn(300, sink=sink, eval_episodes=1, video_interval=50, video_dir=tmp_path)
    assert summary["status"] == "succeeded" and summary["steps"] == 300
    videos = sink.of_kind("video")
    assert len(videos) == 1 and list(videos[0]["values"]) == ["error"]
    assert videos[0]["values"]["error"].startswith("No videos: rlweb-test/Corridor-box-v0 cannot render")
    assert not sink.of_kind("failed") and not list(tmp_path.glob("*.mp4"))


def test_videos_need_a_folder():
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    with pytest.raises(ValueError, match="video_dir"):
        agent.learn(10, video_interval=5)


def test_the_command_line_writes_videos_into_the_out_folder(tmp_path):
    result = subprocess.run([sys.executable, "-m", "trainer", "train", "dqn", "CartPole-v1", "--total-steps", "200",
                             "--out", str(tmp_path), "--video-interval", "100", "--eval-episodes", "1",
                             "--set", "learning_starts=50", "--set", "hidden_layers=16"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in tmp_path.glob("*.mp4")) == ["video_step_100.mp4", "video_step_200.mp4"]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [event["step"] for event in events if event["kind"] == "video"] == [100, 200]
