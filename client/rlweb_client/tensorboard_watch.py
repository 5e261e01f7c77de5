"""`python -m rlweb_client watch-tensorboard DIR --experiment NAME`: follow a TensorBoard log folder while scripts
write it and send its scalars as they come, one rlweb run per folder holding event files (as TensorBoard shows
them). Any script that writes TensorBoard logs (SB3's `tensorboard_log`, CleanRL's `runs/`, rl_games, Lightning) is
then drawn live without a line of it changed. Folders that appear later are followed too; a run whose files have
not grown for `--idle` seconds is finished.

Event files are read with TensorBoard's own loader, which picks up where it stopped and waits out a record still
being written; a script that writes TensorBoard logs has it (torch's SummaryWriter needs it). This module alone
imports it: `import rlweb_client` does not."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Optional

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

from rlweb_client.run import RememberedRun, Run, init
from rlweb_client.tensorboard import EVENT_FILE
from rlweb_client.videos import StepsByTime, VideoFolder

NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_./ -]")  # the server's rule for metric names; the rest become "_"
MAX_NAME_LENGTH = 200


def scalars(event) -> dict[str, float]:
    """The scalars of one event, by metric name (TF1's simple values and TF2's scalar tensors alike: the loader
    gives both as scalar tensors)."""
    values = {}
    for value in event.summary.value:
        if value.metadata.data_class == summary_pb2.DATA_CLASS_SCALAR:
            name = NOT_IN_A_NAME.sub("_", value.tag)[:MAX_NAME_LENGTH] or "_"
            values[name] = float(tensor_util.make_ndarray(value.tensor).item())
    return values


def run_folders(folder: Path) -> list[Path]:
    """Every folder under `folder` (itself included) holding an event file, sorted."""
    if not folder.is_dir():
        return []
    return sorted({path.parent for path in folder.rglob(f"{EVENT_FILE}*") if path.is_file()})


class FollowedRun:
    """One folder of event files and the run its scalars go to."""

    def __init__(self, folder: Path, name: str, run: Run, videos: Optional[VideoFolder] = None):
        self.folder, self.name, self.run, self.videos = folder, name, run, videos
        self.steps = StepsByTime()  # when each step was written: a video goes by its file's time
        self.loaders: dict[Path, EventFileLoader] = {}
        self.grew_at = time.monotonic()
        self.ended = False
        self.points = 0
        self.first_wall_time: Optional[float] = None  # the folder's first event's: its points' times count from it

    def poll(self) -> int:
        """Send what the folder's event files gained since the last poll; returns how many points."""
        sent = 0
        for path in sorted(self.folder.glob(f"{EVENT_FILE}*")):
            if path not in self.loaders:
                self.loaders[path] = EventFileLoader(str(path))
            for event in self.loaders[path].Load():
                values = scalars(event)
                if values:
                    if self.first_wall_time is None:
                        self.first_wall_time = event.wall_time
                    step = max(0, int(event.step))
                    self.steps.add(event.wall_time, step)
                    self.run.log(values, step=step, elapsed=max(0.0, event.wall_time - self.first_wall_time))
                    sent += 1
        if sent:
            self.grew_at, self.points = time.monotonic(), self.points + sent
        self.send_videos()
        return sent

    def send_videos(self, final: bool = False) -> None:
        for path in self.videos.new_videos(final) if self.videos is not None else ():
            step = self.steps.after(path.stat().st_mtime)
            self.run.log_video(path, step=step)
            print(f"{self.name}: video {path.name} at step {step:,}", flush=True)

    def finish(self, why: str) -> None:
        self.send_videos(final=True)
        self.run.finish()
        self.ended = True
        print(f"{self.name}: finished after {self.points:,} points ({why})", flush=True)


def start_run(url: str, token: str, experiment: str, name: str, project: Optional[int], config: dict) -> Run:
    """The folder's run: the one a watcher started for it before (from this working folder), sent again from its
    start, so that a watcher started again doubles nothing and loses nothing; else a new one."""
    remembered = RememberedRun(os.path.join(os.getcwd(), "rlweb-offline"),
                               ["watch", url.rstrip("/"), experiment, name, project, config])
    options = {"experiment": experiment, "name": name, "project": project, "config": config,
               "system_metrics": 0}  # this process is not the training script
    known = remembered.run_id()
    if known is not None:
        try:
            run = init(url, token, resume=known, from_step=0, **options)
            print(f"{name}: this watcher followed it before, into run {known}: sending it there again from its start",
                  flush=True)
            return run
        except ValueError:  # gone from the site: a new run
            pass
    run = init(url, token, **options)
    if run.id is not None:
        remembered.write(run.id, run.url or "")
    return run


def watch(folder: Path, experiment: str, url: Optional[str], token: Optional[str], idle: float = 600.0,
          interval: float = 2.0, until_idle: bool = False, project: Optional[int] = None,
          videos: Optional[Path] = None) -> int:
    """Follow `folder` until interrupted (or, with `until_idle`, until every run found has finished); 0 at the end,
    1 with why when it cannot start. With `videos`, the mp4 files in `videos/<run folder's name>` (where CleanRL's
    `--capture-video` writes them: runs/NAME and videos/NAME) go to that run as they appear."""
    if not url or not token:
        print("give the site's address and an API token (--url and --token, or RLWEB_URL and RLWEB_TOKEN)")
        return 1
    followed: dict[Path, FollowedRun] = {}
    if not run_folders(folder):
        print(f"waiting for event files ({EVENT_FILE}*) under {folder}", flush=True)
    try:
        while True:
            for run_folder in run_folders(folder):
                if run_folder not in followed:
                    name = run_folder.relative_to(folder).as_posix()
                    name = folder.resolve().name if name == "." else name
                    run = start_run(url, token, experiment, name[:MAX_NAME_LENGTH], project,
                                    {"tensorboard_folder": str(run_folder.resolve())})
                    found = VideoFolder(videos / name) if videos is not None else None
                    followed[run_folder] = FollowedRun(run_folder, name, run, found)
                    print(f"{name}: run at {run.url}", flush=True)
            now = time.monotonic()
            for entry in followed.values():
                if entry.ended:
                    continue
                entry.poll()
                if now - entry.grew_at > idle:
                    entry.finish(f"its files did not grow for {idle:g} s")
            if until_idle and followed and all(entry.ended for entry in followed.values()):
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        for entry in followed.values():
            if not entry.ended:
                entry.poll()
                entry.finish("the watcher was stopped")
        return 0


def main(arguments) -> int:
    if arguments.idle <= 0 or arguments.interval <= 0:
        print("--idle and --interval are a number of seconds above 0", file=sys.stderr)
        return 1
    return watch(arguments.folder, arguments.experiment, arguments.url, arguments.token, arguments.idle,
                 arguments.interval, arguments.until_idle, arguments.project, arguments.videos)
