"""The offline file: one run as JSON lines, written when the server cannot be reached, for `python -m rlweb_client
sync DIR` to upload later. One object a line: `{"op": "init", ...}`, `{"op": "synced", "run_id": n}` when the run
exists on the server already, `{"op": "points", "points": [...]}`, `{"op": "file", "kind", "step", "path"}` and
`{"op": "finish", ...}`. A video or checkpoint is copied beside the file (`<file name>-files/`), so the script may
delete or overwrite its own copy; the path is then relative to the folder."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Iterator, Tuple

POINTS_PER_LINE = 1000


class OfflineFile:
    def __init__(self, folder: str, local_id: str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{local_id[:8]}.jsonl"
        self.files = self.folder / f"{self.path.stem}-files"
        self.handle = open(self.path, "a", encoding="utf-8")
        self.copied = 0

    def write(self, record: dict) -> None:
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()

    def write_points(self, points: list) -> None:
        for start in range(0, len(points), POINTS_PER_LINE):
            self.write({"op": "points", "points": points[start:start + POINTS_PER_LINE]})

    def write_file(self, kind: str, step: int, path: str) -> None:
        """The file op, with a copy of the file beside this one (its own path when the copy fails)."""
        self.copied += 1
        target = self.files / f"{self.copied}-{os.path.basename(path)}"
        try:
            self.files.mkdir(exist_ok=True)
            shutil.copyfile(path, target)
            path = str(target.relative_to(self.folder))
        except OSError:
            pass
        self.write({"op": "file", "kind": kind, "step": step, "path": path})


def read_records(path: Path) -> Iterator[Tuple[int, dict]]:
    """(line number, object) for every whole JSON line of an offline file; a line cut short by a crash is skipped."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield number, record


def append_record(path: Path, record: dict) -> None:
    """One more line at the end of `path`, on a line of its own even when the last one was cut short."""
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell():
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
        handle.write(json.dumps(record).encode() + b"\n")
