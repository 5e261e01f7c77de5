"""Which videos in a folder are whole (rlweb_client/videos.py): an MP4 that ffmpeg is still writing is not, however
long it has not changed (ffmpeg holds its output back), and one it closed is, once it has settled."""

from __future__ import annotations

import os
import time

import imageio
import numpy as np

from rlweb_client.videos import VideoFolder, whole_mp4


def test_an_mp4_is_whole_only_once_its_writer_closed_it(tmp_path):
    path = tmp_path / "rl-video-episode-0.mp4"
    writer = imageio.get_writer(str(path), fps=30, macro_block_size=1)
    for index in range(40):
        writer.append_data(np.full((64, 64, 3), index * 5, dtype=np.uint8))
    deadline = time.monotonic() + 10
    while not path.exists():  # ffmpeg starts the file (48 bytes: its header) and holds the frames back
        assert time.monotonic() < deadline
        time.sleep(0.05)
    folder = VideoFolder(tmp_path, settle=0.0)
    old = time.time() - 60
    os.utime(path, (old, old))  # as if it had not changed for a minute
    assert not whole_mp4(path)
    assert folder.new_videos() == [] and folder.new_videos() == []  # two looks: still being written
    writer.close()
    assert whole_mp4(path)
    assert folder.new_videos() == []  # changed since the last look
    assert folder.new_videos() == [path] and folder.new_videos() == []  # then once


def test_a_file_that_is_not_an_mp4_is_not_whole_but_a_final_look_takes_it(tmp_path):
    path = tmp_path / "cut.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 16 + b"\x00\x00\x00\x00mdat" + b"frames")
    folder = VideoFolder(tmp_path, settle=0.0)
    assert not whole_mp4(path)
    assert folder.new_videos() == [] and folder.new_videos() == []
    assert folder.new_videos(final=True) == [path]
