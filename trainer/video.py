"""Episode videos: play one greedy episode on an env that renders RGB frames and write it as an H.264 mp4
(imageio with the ffmpeg binary of imageio-ffmpeg), frame by frame, so a long episode needs little memory."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from trainer.envs import make_env

MAX_FRAMES = 5_000  # a longer episode is cut here (its return so far is reported)


class CannotRender(Exception):
    """The environment gives no RGB frames (no `rgb_array` render mode, or a missing dependency)."""


def video_env(env_id: str):
    """The env for recording, made once; CannotRender when it has no `rgb_array` rendering."""
    try:
        with warnings.catch_warnings():  # gymnasium warns of a render mode the env lacks: checked below
            warnings.simplefilter("ignore")
            env = make_env(env_id, render_mode="rgb_array")
    except Exception as error:  # noqa: BLE001 - each env reports this differently
        raise CannotRender(f"{env_id} cannot render RGB frames: {error}") from error
    if "rgb_array" not in env.metadata.get("render_modes", []):
        env.close()
        raise CannotRender(f"{env_id} has no rgb_array render mode")
    return env


def record_episode(agent, env, path: str | Path, seed: int | None = None, should_stop=None) -> dict | None:
    """Play one episode of the agent's greedy policy on `env` and write it to `path` (mp4), through a
    temporary file renamed at the end: `path` never holds part of a video. Returns the episode's return
    and length, and the path; None when `should_stop` (asked between steps) interrupted it."""
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fps = env.metadata.get("render_fps") or 30
    observation, _ = env.reset(seed=seed)
    agent.reset_state()
    total, length, done = 0.0, 0, False
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".video-", suffix=".mp4")
    os.close(handle)
    try:
        writer = imageio.get_writer(temporary, format="FFMPEG", fps=fps, codec="libx264", pixelformat="yuv420p",
                                    macro_block_size=1, output_params=["-movflags", "+faststart"])
        try:
            writer.append_data(frame_of(env))
            while not done and length < MAX_FRAMES:
                if should_stop is not None and should_stop():
                    return None
                observation, reward, terminated, truncated, _ = env.step(agent.predict(observation,
                                                                                       deterministic=True))
                total += float(reward)
                length += 1
                done = terminated or truncated
                writer.append_data(frame_of(env))
        finally:
            writer.close()
        with open(temporary, "rb") as written:  # ffmpeg reports no failure: a finished mp4 begins with its index
            if b"moov" not in written.read(4096):
                raise OSError(f"ffmpeg could not write a complete video to {path.parent}")
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return {"path": str(path), "episode_return": total, "length": length}


def frame_of(env) -> np.ndarray:
    """The env's current RGB frame, cropped to even sides (H.264 in yuv420p needs them)."""
    frame = env.render()
    if frame is None or np.ndim(frame) != 3:
        raise CannotRender(f"{env.spec.id if env.spec else env} rendered no RGB frame")
    height, width = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
    return np.ascontiguousarray(frame[:height, :width, :3], dtype=np.uint8)
