"""Episode videos a script writes into a folder (Gymnasium's `RecordVideo`, CleanRL's `--capture-video`, SB3's
`VecVideoRecorder`), found as they appear so that the run uploads each one once. A recorder writes a video while
its episode runs, and ffmpeg may hold its output back for seconds: a file counts as whole once its MP4 boxes span it
and hold the `moov` box ffmpeg writes last (`whole_mp4`), its size and modification time are the same at two looks,
and it was last written `settle` seconds before; or at once when the recorder is done (`final`: the script ended,
or SB3's recorder, which writes in the training thread).

A video goes at the step the script logged first after its recorder last wrote it (`StepsByTime`): a recorder
closes a video as its episode ends, and the script logs that episode's return right after, at its step."""

from __future__ import annotations

import bisect
import os
import struct
import time
from pathlib import Path

SUFFIXES = (".mp4",)  # what the run page plays


class VideoFolder:
    def __init__(self, folder, settle: float = 1.0):
        self.folder = Path(folder)
        self.settle = settle
        self.looked: dict[Path, tuple[int, float]] = {}  # each file's size and modification time at the last look
        self.found: set[Path] = set()

    def new_videos(self, final: bool = False) -> list[Path]:
        """The videos that became whole since the last call, oldest first (none while the folder does not exist)."""
        try:
            entries = sorted((entry.stat().st_mtime, Path(entry.path)) for entry in os.scandir(self.folder)
                             if entry.is_file() and entry.name.lower().endswith(SUFFIXES))
        except OSError:  # not there yet, or a file went away between the listing and its stat
            return []
        whole = []
        for _, path in entries:
            if path in self.found:
                continue
            try:
                stat = path.stat()
            except OSError:
                continue
            now, last = (stat.st_size, stat.st_mtime), self.looked.get(path)
            self.looked[path] = now
            if final or (now == last and time.time() - stat.st_mtime >= self.settle and whole_mp4(path)):
                self.found.add(path)
                whole.append(path)
        return whole


def whole_mp4(path: Path) -> bool:
    """Whether the file's top-level MP4 boxes follow one another to its end and one is `moov`, the index ffmpeg
    writes when it closes the file (before that, `mdat` runs to the end or its size is not filled in yet)."""
    try:
        with open(path, "rb") as handle:
            size, at, indexed = os.fstat(handle.fileno()).st_size, 0, False
            while at < size:
                handle.seek(at)
                header = handle.read(16)
                if len(header) < 8:
                    return False
                length, kind = struct.unpack(">I4s", header[:8])
                if length == 1 and len(header) == 16:  # a 64-bit size
                    length = struct.unpack(">Q", header[8:])[0]
                if length < 8:  # 0: "to the end of the file", as a box still being written says
                    return False
                indexed = indexed or kind == b"moov"
                at += length
            return indexed and at == size
    except OSError:
        return False


class StepsByTime:
    """When the script logged which step: (wall time, step) of the first point logged in each `spacing` seconds,
    the last `length` of them, to place a video by its file's modification time."""

    def __init__(self, spacing: float = 0.05, length: int = 100_000):
        self.spacing, self.length = spacing, length
        self.times: list[float] = []
        self.steps: list[int] = []
        self.latest = 0

    def add(self, wall_time: float, step: int) -> None:
        self.latest = step
        if self.times and wall_time - self.times[-1] < self.spacing:
            return
        if len(self.times) >= self.length:
            del self.times[:self.length // 2], self.steps[:self.length // 2]
        self.times.append(wall_time)
        self.steps.append(step)

    def after(self, wall_time: float) -> int:
        """The step logged first at or after `wall_time` (the latest step when none was logged since)."""
        index = bisect.bisect_left(self.times, wall_time)
        return self.steps[index] if index < len(self.steps) else self.latest
