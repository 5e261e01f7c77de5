"""Episode videos a script's recorder writes into a folder, uploaded by rlweb_client to a live server: with
`init(video_folder=...)` from the script itself, and with `watch-tensorboard --videos` beside a TensorBoard folder
(CleanRL's `runs/NAME` and `videos/NAME`). A recorder (imageio's ffmpeg writer, as the trainer's) writes each video
frame by frame while its episode runs; each must arrive once, whole, at the step its episode ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Run, Video
from tests.web.test_tensorboard_import import CLIENT
from tests.web.test_tensorboard_watch import wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread reads what the test wrote

RECORDER = '''
import json, sys, time
import gymnasium as gym
import imageio
import numpy as np

def record(env, path, seed, on_step=lambda reward: None, frame_seconds=0.01):
    """One episode of random actions filmed frame by frame (slowly, as training takes), its return."""
    writer = imageio.get_writer(path, fps=30, macro_block_size=1)
    env.reset(seed=seed)
    rng, total, done = np.random.default_rng(seed), 0.0, False
    while not done:
        writer.append_data(env.render())
        _, reward, terminated, truncated, _ = env.step(int(rng.integers(2)))
        total += reward
        done = terminated or truncated
        on_step(reward)
        time.sleep(frame_seconds)
    writer.close()
    return total
'''

SCRIPT = RECORDER + '''
import rlweb_client
env = gym.make("CartPole-v1", render_mode="rgb_array")
run = rlweb_client.init(experiment="filmed", video_folder="videos/filmed", offline_dir="offline")
step, ends = 0, []
for episode in range(3):
    def count(reward):
        global step
        step += 1
    total = record(env, f"videos/filmed/rl-video-episode-{episode}.mp4", seed=episode, on_step=count)
    run.log({"charts/episodic_return": total}, step=step)
    ends.append(step)
    time.sleep(2.5 if episode < 2 else 0)  # the next episode: the first two are found while the script runs
run.finish()
print(json.dumps({"id": run.id, "ends": ends}))
'''


def environment(url: str, token: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": url, "RLWEB_TOKEN": token}


def assert_each_video_once_and_whole(run: Run, folder: Path, steps: list[int]) -> None:
    videos = list(Video.objects.filter(run=run).order_by("pk"))
    files = sorted(folder.glob("*.mp4"), key=lambda path: path.stat().st_mtime)
    assert [video.file.read() for video in videos] == [path.read_bytes() for path in files]
    assert [video.step for video in videos] == steps


def test_a_scripts_recorder_videos_are_uploaded_whole_once_at_the_step_their_episode_ended(live_server, owner,
                                                                                          tmp_path):
    _, token = ApiToken.issue(owner, "filmed")
    (tmp_path / "videos" / "filmed").mkdir(parents=True)
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=environment(live_server.url, token))
    assert done.returncode == 0 and "rlweb:" not in done.stderr, done.stderr  # the client said nothing went wrong
    result = json.loads(done.stdout)
    run = Run.objects.get(pk=result["id"])
    assert run.status == Run.Status.SUCCEEDED
    assert_each_video_once_and_whole(run, tmp_path / "videos" / "filmed", result["ends"])


def test_watch_tensorboard_uploads_each_runs_videos_from_the_folder_of_its_name(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "watch")
    recorder: dict = {}
    exec(compile(RECORDER, "recorder.py", "exec"), recorder)  # the script's recorder, run here as the training
    import gymnasium as gym

    name = "CartPole-v1__ppo__1__1764460000"  # CleanRL's run_name: runs/NAME and videos/NAME
    videos = tmp_path / "videos" / name
    videos.mkdir(parents=True)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "rlweb_client", "watch-tensorboard", "runs", "--experiment", "cleanrl",
         "--videos", "videos", "--idle", "6", "--interval", "0.2", "--until-idle"], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment(live_server.url, token))
    try:
        writer = SummaryWriter(str(tmp_path / "runs" / name))
        env, step, ends = gym.make("CartPole-v1", render_mode="rgb_array"), 0, []
        for episode in range(2):
            total = recorder["record"](env, str(videos / f"rl-video-episode-{episode}.mp4"), seed=episode)
            step += int(total)
            writer.add_scalar("charts/episodic_return", total, step)
            writer.flush()
            ends.append(step)
            run = wait_for(lambda: Run.objects.filter(experiment__name="cleanrl").first(), 30, "the run")
            wait_for(lambda: Video.objects.filter(run=run).count() == episode + 1, 30, f"video {episode}")
        writer.close()
        out, errors = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 0, out + errors
    run = Run.objects.get(experiment__name="cleanrl")
    assert run.status == Run.Status.SUCCEEDED
    assert_each_video_once_and_whole(run, videos, ends)
    assert f"{name}: video rl-video-episode-0.mp4 at step {ends[0]:,}" in out
