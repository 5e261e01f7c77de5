"""A run logged from a script. `log()` only appends a point to a queue in memory and returns; a background thread
sends the queue in order, in batches, retrying with exponential back-off while the server does not answer. Each
point carries a sequence number (1, 2, ...) and the server stores each one once, so a batch sent again after a lost
answer doubles nothing. When the server stays unreachable longer than `offline_after` seconds (or at `init`), the
run goes on in an offline file that `python -m rlweb_client sync DIR` uploads later."""

from __future__ import annotations

import atexit
import collections
import hashlib
import itertools
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from typing import Any, Mapping, Optional, Union
from urllib.parse import urljoin

from rlweb_client.batches import DEFAULT_MAX_BYTES, count_fitting, max_bytes_of
from rlweb_client.offline import OfflineFile
from rlweb_client.transport import Api, Refused, Unreachable
from rlweb_client.system import SystemSampler, interval_seconds
from rlweb_client.videos import StepsByTime, VideoFolder

VERSION = "0.3.0"
STATUSES = ("succeeded", "failed", "cancelled")
VIDEO_LOOK_SECONDS = 2.0  # between looks into `video_folder`
DROP_NOTES = 10  # values the server dropped (NaN, a bad name) are reported on stderr up to this many times
LIMITS = {"experiment": 200, "name": 200}  # the server's, in characters
MAX_CONFIG_BYTES = 64 * 1024  # the server's, as JSON


class Run:
    """Made by `rlweb_client.init(...)`. `url` is the run's page (None while it exists only offline), `id` its id
    on the server, `pending` what waits to be sent, `offline_path` the offline file once there is one."""

    def __init__(self, api: Api, experiment: str, config: dict, name: Optional[str], offline_dir: str,
                 offline_after: float, retry_delay: float, max_retry_delay: float, max_pending: int,
                 batch_size: int, flush_interval: float, project: Optional[int] = None,
                 resume: Optional[int] = None, from_step: Optional[int] = None,
                 remembered: Optional[RememberedRun] = None, video_folder=None, system_seconds: float = 0.0):
        self.api = api
        self.resume_id = resume  # the run to go on logging into (None: a new one)
        self.from_step = from_step
        self.remembered = remembered  # resume="auto": the file naming the run this folder started
        self.offline_dir = offline_dir
        self.offline_after = offline_after
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.id: Optional[int] = None
        self.url: Optional[str] = None
        self.local_id = uuid.uuid4().hex
        self.started = time.monotonic()
        self.init_body = {"experiment": experiment, **({"name": name} if name is not None else {}),
                          "config": config, "host": socket.gethostname()[:200], "command": shlex.join(sys.argv)[:10_000],
                          "git_commit": git_commit(), "client_version": VERSION,
                          **({"project": project} if project is not None else {})}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._file_lock = threading.Lock()  # taken before `_lock`: writes to the offline file keep the queue's order
        self._queue: collections.deque = collections.deque()  # ("points", point) | ("file", op) | ("finish", body)
        self._seq = 0
        self._step = -1
        self.videos = VideoFolder(video_folder) if video_folder is not None else None
        self._steps_by_time = StepsByTime()  # when each step was logged: where a video found later goes
        self._batch_limit = batch_size  # halved while the server answers 413 to a batch
        self._points_max_bytes = DEFAULT_MAX_BYTES  # a points request's body, as the server bounds it
        self._offline: Optional[OfflineFile] = None
        self._overflow = False
        self._closing = False
        self._ended = False  # the server ended the run (cancelled on its page): nothing more is sent
        self._failing_since: Optional[float] = None
        self._attempt = 0
        self._reported: set = set()
        self._drop_notes = 0
        self._create()
        self._thread = threading.Thread(target=self._send_loop, name="rlweb-client", daemon=True)
        self._thread.start()
        self._videos_stop = threading.Event()
        if self.videos is not None:
            self._videos_thread = threading.Thread(target=self._watch_videos, name="rlweb-videos", daemon=True)
            self._videos_thread.start()
        self.system_seconds = system_seconds
        if system_seconds > 0:
            self._system = SystemSampler()
            threading.Thread(target=self._sample_system, name="rlweb-system", daemon=True).start()
        atexit.register(self._at_exit)

    # --- what the script calls

    def log(self, values: Mapping[str, Any], step: Optional[int] = None, elapsed: Optional[float] = None) -> None:
        """Queue one point: `values` by metric name, at env step `step` (default: the last step + 1), `elapsed`
        seconds after the run started (default: the time since `init`; a log written earlier gives its own)."""
        if elapsed is not None and not (isinstance(elapsed, (int, float)) and 0 <= elapsed < float("inf")):
            raise ValueError(f"elapsed is a number of seconds, 0 or more, not {elapsed!r}")
        numbers = {}
        for name, value in values.items():
            number = as_number(value)
            if number is None:
                self._report(("not a number", name), f"{name!r} = {value!r} is not a number; it is not logged")
            else:
                numbers[str(name)] = number
        with self._lock:
            if self._closing:
                self._report("closed", "log() after finish() is ignored")
            if self._closing or self._ended:
                return
            step = self._step + 1 if step is None else int(step)
            if step < 0:
                raise ValueError(f"step must be 0 or more, not {step}")
            self._step = step
            if self.videos is not None:
                self._steps_by_time.add(time.time(), step)
            self._queue_point(step, elapsed, numbers)

    def _queue_point(self, step: int, elapsed: Optional[float], numbers: dict) -> None:
        """(With the lock.)"""
        self._seq += 1
        seconds = time.monotonic() - self.started if elapsed is None else float(elapsed)
        self._queue.append(("points", {"seq": self._seq, "step": step, "time": round(seconds, 3), "values": numbers}))
        if len(self._queue) == 1 or len(self._queue) % self.batch_size == 0:
            self._wake.notify()
        if len(self._queue) > self.max_pending and self._offline is None and not self._overflow:
            self._overflow = True
            self._wake.notify()

    def log_video(self, path, step: int) -> None:
        """Upload an episode video (mp4, webm or gif) shown at env step `step`. The file is read in the background:
        keep it until finish()."""
        self._log_file("video", path, step)

    def log_checkpoint(self, path, step: int) -> None:
        """Upload a checkpoint file saved at env step `step`, read in the background: keep it until finish()."""
        self._log_file("checkpoint", path, step)

    def finish(self, status: str = "succeeded", error: Optional[str] = None, timeout: float = 60.0) -> None:
        """End the run: send what is queued, waiting at most `timeout` seconds; what is not sent by then goes to
        the offline file. Never raises for the network; a second call does nothing."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        if self.videos is not None and not self._videos_stop.is_set():
            self._videos_stop.set()
            self._videos_thread.join()
            self._send_new_videos(final=True)  # the script has ended: its recorder closed its last video
        with self._lock:
            if self._closing:
                return
            self._closing = True
            body = {"status": status, "last_seq": self._seq, **({"error": str(error)[-10000:]} if error else {})}
            self._queue.append(("finish", body))
            self._wake.notify_all()
        if self.remembered is not None and status == "succeeded":  # the next start makes a new run
            self.remembered.forget()
        atexit.unregister(self._at_exit)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._go_offline(f"finish() could not send everything to {self.api.site} within {timeout:g} s")
        self._spill()  # what was queued offline after the thread ended, if it did

    @property
    def pending(self) -> int:
        """Points, files and the finish that wait to be sent (0 once they are in the offline file)."""
        with self._lock:
            return len(self._queue)

    @property
    def offline_path(self):
        return self._offline.path if self._offline else None

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind, error, trace) -> bool:
        if error is None:
            self.finish()
        elif isinstance(error, KeyboardInterrupt):
            self.finish("cancelled", "KeyboardInterrupt")
        else:
            self.finish("failed", "".join(traceback.format_exception(kind, error, trace)))
        return False

    # --- the background threads

    def _watch_videos(self) -> None:
        """Upload the videos that appear in `video_folder` until finish(), each at the step of the episode it filmed
        (the step logged first after its recorder last wrote it)."""
        while not self._videos_stop.wait(VIDEO_LOOK_SECONDS):
            try:
                self._send_new_videos()
            except Exception as error:  # a bug of ours must not end the script: the videos just stop
                self._report("videos", f"stopped looking for videos in {self.videos.folder} ({error!r})")
                return

    def _sample_system(self) -> None:
        """A `system/...` point every `system_seconds`, at the step logged last, until finish()."""
        while True:
            time.sleep(self.system_seconds)
            try:
                values = self._system.sample()
            except Exception as error:  # a bug of ours must not end the script: the samples just stop
                self._report("system", f"stopped sampling system metrics ({error!r})")
                return
            with self._lock:
                if self._closing or self._ended:
                    return
                self._queue_point(max(self._step, 0), None, values)

    def _send_new_videos(self, final: bool = False) -> None:
        for path in self.videos.new_videos(final):
            with self._lock:
                step = self._steps_by_time.after(path.stat().st_mtime) if self._step >= 0 else 0
            self._log_file("video", path, step)

    def _send_loop(self) -> None:
        try:
            self._send()
        except Exception as error:  # a bug of ours must not lose the run: the rest goes to the offline file
            self._go_offline(f"the client's sending thread failed ({error!r})")

    def _send(self) -> None:
        while True:
            with self._wake:
                self._wait_for_work()
                if self._closing and not self._queue:
                    return
                items = None if self._offline else self._first_items()
            if items is None:
                self._spill()
            else:
                self._deliver(items)

    def _wait_for_work(self) -> None:
        """(With the lock.) Until something is queued, then until a batch is full or `flush_interval` passed."""
        while not self._queue and not self._closing:
            self._wake.wait()
        deadline = time.monotonic() + self.flush_interval
        while (len(self._queue) < self._batch_limit and not self._closing and not self._overflow
               and deadline > time.monotonic()):
            self._wake.wait(deadline - time.monotonic())
        if self._overflow and not self._offline:
            self._go_offline_locked(f"more than {self.max_pending} points wait to be sent")

    def _first_items(self) -> list:
        """(With the lock.) The points at the front of the queue, up to a batch (in points, and in bytes under the
        server's bound), or its first file or finish."""
        if self._queue[0][0] != "points":
            return [self._queue[0]]
        front = list(itertools.islice(itertools.takewhile(lambda item: item[0] == "points", self._queue),
                                      self._batch_limit))
        return front[:count_fitting([item[1] for item in front], self._points_max_bytes)]

    def _deliver(self, items: list) -> None:
        """Send `items` until the server takes them, refuses them, or the run goes offline."""
        kind, payload = items[0]
        while True:
            try:
                if kind == "points":
                    answer = self.api.post(f"/logged-runs/{self.id}/points", {"points": [item[1] for item in items]})
                    self._note_dropped(answer)
                elif kind == "file":
                    self.api.post_file(f"/logged-runs/{self.id}/files",
                                       {"kind": payload["kind"], "step": payload["step"]}, payload["path"])
                else:
                    self.api.post(f"/logged-runs/{self.id}/finish", payload)
            except Unreachable as error:
                if self._wait_to_retry(error):
                    continue
                return
            except Refused as error:
                self._refused(items, error)
                return
            except OSError as error:  # the file to upload is gone
                self._report(("file", payload["path"]), f"cannot read {payload['path']} ({error}); not uploaded")
            self._taken(items)
            return

    def _taken(self, items: list) -> None:
        with self._lock:
            self._failing_since = None
            self._attempt = 0
            if not self._offline:  # else finish() moved them to the offline file already
                for _ in items:
                    self._queue.popleft()

    def _wait_to_retry(self, error: Unreachable) -> bool:
        """Wait the next back-off delay (exponential, with jitter, capped); False once the run went offline."""
        with self._wake:
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since = now
                self._report("unreachable", f"{self.api.site} does not answer ({error}); retrying, the points wait "
                                            f"in memory (at most {self.offline_after:g} s, then in a file)")
            if self._offline:
                return False
            if now - self._failing_since >= self.offline_after:
                self._go_offline_locked(f"cannot reach {self.api.site} for {now - self._failing_since:.0f} s "
                                        f"({error})")
                return False
            delay = min(self.max_retry_delay, self.retry_delay * 2 ** self._attempt)
            delay = delay / 2 + random.uniform(0, delay / 2)
            if error.retry_after is not None:
                delay = min(max(delay, error.retry_after), self.max_retry_delay)
            self._attempt += 1
            until = now + min(delay, self._failing_since + self.offline_after - now)
            while not self._offline and not self._overflow and until > time.monotonic():
                self._wake.wait(until - time.monotonic())
            if self._overflow and not self._offline:
                self._go_offline_locked(f"more than {self.max_pending} points wait to be sent")
            return not self._offline

    def _refused(self, items: list, error: Refused) -> None:
        kind, payload = items[0]
        if error.status == 413 and kind == "points" and len(items) > 1:
            with self._lock:
                self._batch_limit = max(1, len(items) // 2)
            return
        if error.status == 409:
            self._report("ended", f"the run has ended on the server ({error.detail}); what it logs from now on is "
                                  f"not sent")
            with self._lock:
                self._ended = True
                self._queue.clear()
            return
        if error.status in (400, 413, 422) and kind != "finish":
            what = f"{len(items)} points from seq {payload['seq']}" if kind == "points" else payload["path"]
            self._report(("refused", kind, error.status), f"the server refused {what}: {error}; dropped")
            self._taken(items)
            return
        self._go_offline(f"the server refused this run's {kind} ({error})")

    def _note_dropped(self, answer: Any) -> None:
        for drop in (answer.get("dropped") or []) if isinstance(answer, dict) else []:
            if "repeat" in str(drop.get("reason")):  # a batch sent again after a lost answer: as it should be
                continue
            self._drop_notes += 1
            if self._drop_notes <= DROP_NOTES:
                print(f"rlweb: the server dropped a value of point {drop.get('seq')}: {drop.get('reason')}",
                      file=sys.stderr)
            if self._drop_notes == DROP_NOTES:
                print("rlweb: further dropped values are not reported", file=sys.stderr)

    # --- offline

    def _create(self) -> None:
        """Create the run on the server, or resume the one asked for (three tries), else start it offline."""
        problem = None
        for attempt in range(3):
            try:
                answer = self._resume() if self.resume_id is not None else self.api.post("/logged-runs",
                                                                                       self.init_body)
                self.id = int(answer["id"])
                self._points_max_bytes = max_bytes_of(answer)
                self.url = urljoin(self.api.site, str(answer.get("url") or ""))
                if self.remembered is not None:
                    self.remembered.write(self.id, self.url)
                return
            except Unreachable as error:
                problem = error
                if attempt < 2:
                    time.sleep(self.retry_delay * 2 ** attempt)
            except Refused as error:
                if self.resume_id is None or error.status != 404:
                    problem = error
                    break
                if self.remembered is None:
                    raise ValueError(f"cannot resume run {self.resume_id} at {self.api.site}: {error.detail}") from None
                self._report("gone", f"run {self.resume_id}, which this folder started, is gone from "
                                     f"{self.api.site}; starting a new run")
                self.resume_id = self.from_step = None
            except (KeyError, TypeError, ValueError) as error:
                problem = error
                break
        self._go_offline(f"could not start the run at {self.api.site} ({problem})")

    def _resume(self) -> dict:
        """Go on logging into run `resume_id`: the points number on after its stored ones, the steps and the clock
        go on from where it stands (after `from_step`'s forgetting)."""
        body = {key: self.init_body[key] for key in ("host", "command", "git_commit", "client_version")}
        answer = self.api.post(f"/logged-runs/{self.resume_id}/resume", {**body, "from_step": self.from_step})
        self._seq = int(answer["next_seq"]) - 1
        self._step = int(answer["step"])
        self.started = time.monotonic() - float(answer["seconds"])
        return answer

    def _go_offline(self, reason: str) -> None:
        with self._lock:
            self._go_offline_locked(reason)
        self._spill()

    def _go_offline_locked(self, reason: str) -> None:
        """(With the lock.) Open the offline file with the run's init; the queue follows through `_spill`."""
        if self._offline:
            return
        try:
            offline = OfflineFile(self.offline_dir, self.local_id)
            resume = {"resume": self.resume_id, "from_step": self.from_step} if self.resume_id is not None else {}
            offline.write({"op": "init", **self.init_body, **resume, "local_id": self.local_id,
                           "server": self.api.site})
            if self.id is not None:
                offline.write({"op": "synced", "run_id": self.id})
        except OSError as error:
            self._report("no offline file", f"{reason}; cannot write the offline file in {self.offline_dir} "
                                            f"({error}): the points wait in memory")
            return
        self._offline = offline
        self._overflow = False
        self._wake.notify_all()
        self._report("offline", f"{reason}; this run goes on in {offline.path}: upload it later with "
                                f"`python -m rlweb_client sync {shlex.quote(str(offline.folder))}`")

    def _spill(self) -> None:
        """Move everything queued to the offline file, in order (nothing while there is none)."""
        with self._file_lock:
            with self._lock:
                if not self._offline:
                    return
                items = list(self._queue)
                self._queue.clear()
            points = []
            for kind, payload in items + [("end", None)]:
                if kind != "points" and points:
                    self._offline.write_points(points)
                    points = []
                if kind == "points":
                    points.append(payload)
                elif kind == "file":
                    self._offline.write_file(payload["kind"], payload["step"], payload["path"])
                elif kind == "finish":
                    self._offline.write({"op": "finish", **payload})

    # --- helpers

    def _log_file(self, kind: str, path, step: int) -> None:
        path = os.path.abspath(os.fspath(path))
        if not os.path.isfile(path):
            self._report(("file", path), f"no file at {path}; not uploaded")
            return
        with self._lock:
            if self._closing:
                self._report("closed", "log() after finish() is ignored")
            if self._closing or self._ended:
                return
            self._queue.append(("file", {"kind": kind, "step": int(step), "path": path}))
            self._wake.notify()

    def _report(self, key, message: str) -> None:
        """Say `message` on stderr, once per `key`."""
        if key not in self._reported:
            self._reported.add(key)
            print(f"rlweb: {message}", file=sys.stderr)

    def _at_exit(self) -> None:
        """The script ends without finish(): an uncaught exception (sys.last_value) fails the run."""
        error = getattr(sys, "last_value", None)
        if error is None:
            self.finish()
        elif isinstance(error, KeyboardInterrupt):
            self.finish("cancelled", "KeyboardInterrupt")
        else:
            self.finish("failed", "".join(traceback.format_exception(type(error), error, error.__traceback__)))


def init(url: Optional[str] = None, token: Optional[str] = None, experiment: Optional[str] = None,
         config: Any = None, name: Optional[str] = None, offline_dir: Optional[str] = None, *,
         offline_after: float = 60.0, retry_delay: float = 0.5, max_retry_delay: float = 30.0,
         max_pending: int = 1_000_000, batch_size: int = 1000, flush_interval: float = 0.35,
         project: Optional[int] = None, resume: Union[int, str, None] = None, from_step: Optional[int] = None,
         video_folder=None, system_metrics: Optional[float] = None) -> Run:
    """Start a run of `experiment` on the rlweb site at `url` (default: $RLWEB_URL) with an API token (default:
    $RLWEB_TOKEN), in the project of id `project` (default: $RLWEB_PROJECT, else your private space; one you own or
    edit: its members see the run). `config` is a JSON object (a dict, or an argparse Namespace). Without a server
    answer the run goes on in a file in `offline_dir` (default ./rlweb-offline). `offline_after`: seconds of outage
    before that; `retry_delay` and `max_retry_delay`: the first and the longest back-off between tries.

    `resume` (default: $RLWEB_RESUME) goes on logging into an existing run instead of starting one, for a script
    started again after a crash, a preemption, or to train longer: a run's id, or "auto" for the run this folder
    (`offline_dir`) last started with the same site, experiment, name, project and config and did not finish
    `succeeded` (none: a new run). `from_step`: the env step the script goes on from (its checkpoint's, 0 when it
    starts over); what the run logged past it is forgotten, so no step is drawn twice. Without it everything is
    kept. A new run ignores it.

    `video_folder`: a folder where the script's recorder writes episode videos (Gymnasium's `RecordVideo`,
    CleanRL's `videos/{run_name}`): each new .mp4 is uploaded once whole, at the step logged first after its
    recorder last wrote it (the step of the episode it filmed, whose return the script logs as it ends).

    `system_metrics`: seconds between samples of what the process uses (`system/cpu_percent`, `system/rss_mb`, the
    machine's memory, and the GPU when the script uses CUDA through torch), logged at the step logged last; 0 for
    none; default $RLWEB_SYSTEM_METRICS_SECONDS, else 10."""
    url = url or os.environ.get("RLWEB_URL")
    token = token or os.environ.get("RLWEB_TOKEN")
    if not url or not token:
        raise ValueError("rlweb_client.init needs the site's url and an API token (or RLWEB_URL and RLWEB_TOKEN)")
    if not experiment:
        raise ValueError("rlweb_client.init needs an experiment name")
    for field, text in (("experiment", experiment), ("name", name or "")):
        if len(text) > LIMITS[field]:
            raise ValueError(f"the {field} has at most {LIMITS[field]} characters")
    if config is not None and not isinstance(config, Mapping):
        config = vars(config)  # an argparse Namespace
    config = json.loads(json.dumps(dict(config or {}), default=str))
    if len(json.dumps(config)) > MAX_CONFIG_BYTES:
        raise ValueError(f"the config takes more than {MAX_CONFIG_BYTES // 1024} KB as JSON")
    if project is None and os.environ.get("RLWEB_PROJECT"):
        project = os.environ["RLWEB_PROJECT"]
    if project is not None:
        try:
            project = int(project)
        except (TypeError, ValueError):
            raise ValueError(f"the project is a project's id (a whole number), not {project!r}") from None
        if project < 1:
            raise ValueError(f"the project is a project's id (a whole number from 1), not {project}")
    if from_step is not None and (isinstance(from_step, bool) or not isinstance(from_step, int) or from_step < 0):
        raise ValueError(f"from_step is an env step (a whole number, 0 or more), not {from_step!r}")
    system_seconds = interval_seconds(system_metrics)
    api = Api(url, token, user_agent=f"rlweb-client/{VERSION}")
    offline_dir = offline_dir or os.path.join(os.getcwd(), "rlweb-offline")
    remembered = None
    if resume is None and os.environ.get("RLWEB_RESUME"):
        resume = os.environ["RLWEB_RESUME"]
    if resume == "auto":
        remembered = RememberedRun(offline_dir, [api.site, experiment, name or "", project, config])
        resume = remembered.run_id()
        if resume is None:
            from_step = None  # a new run: nothing to forget
    elif resume is not None:
        resume = run_id_of(resume)
    if from_step is not None and resume is None and remembered is None:
        raise ValueError("from_step goes with resume: the run to go on logging into")
    return Run(api, experiment, config, name, offline_dir, offline_after, retry_delay, max_retry_delay, max_pending,
               batch_size, flush_interval, project, resume, from_step, remembered, video_folder, system_seconds)


def run_id_of(value: Any) -> int:
    """`resume`'s run id (a whole number from 1, or its digits), else ValueError."""
    try:
        number = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        number = None
    if number is None or number < 1:
        raise ValueError(f'resume is a run\'s id (a whole number from 1) or "auto", not {value!r}')
    return number


class RememberedRun:
    """For resume="auto": a small file in the offline folder naming the run that a script of this site, experiment,
    name, project and config started there, until it finishes succeeded."""

    def __init__(self, folder: str, key: list):
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        self.path = os.path.join(folder, f"resume-{digest}.json")

    def run_id(self) -> Optional[int]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                return run_id_of(json.load(handle)["run"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, run_id: int, url: str) -> None:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as handle:
                json.dump({"run": run_id, "url": url}, handle)
        except OSError as error:
            print(f"rlweb: cannot write {self.path} ({error}); a restart will not resume this run", file=sys.stderr)

    def forget(self) -> None:
        try:
            os.remove(self.path)
        except OSError:
            pass


def as_number(value: Any):
    """`value` as a JSON number (numpy and torch scalars included), or None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def git_commit() -> str:
    """The commit checked out in the current folder, or "" outside a git repository or without git."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
