"""The sink a training task reports to: each event goes to the run's Redis stream (the live view, redis_keys.py),
to an `Event` row with the summary the charts draw (history.py), and its checkpoint or video file into storage.

Every event a run reports gets a sequence number `seq` (1, 2, 3, ...). The same number is the event's
Redis stream id (`<seq>-0`), its `Event.seq` row in the database and its SSE `id:` (live.py), so a page that drew
the stored history up to `seq` N and then follows the stream from N never loses or doubles a point.
The stream holds what the database does not have yet plus a short tail: after each write to the database
the sink trims it to the last `STREAM_TAIL` stored events (XTRIM MINID), and a finished run's stream expires
`FINISHED_STREAM_SECONDS` after its end, so Redis memory grows with the runs training, not with the runs
kept. Events the stream no longer holds (trimmed, expired, or lost in a Redis restart) are read back from
the database.

Outages: Redis carries only the live view. While it does not answer, the sink keeps the events it could
not add to the stream in a bounded buffer, leaves Redis alone for a back-off, and adds them when it
answers again, after writing every event to the database first (so a follower that finds a gap in the
stream reads it from there). When the database does not answer, its events wait in memory and each flush
tries again; after `database_patience` seconds (or too many events) the run ends with a clear error.

Watchers: other apps see a worker's runs through a hook (`watch_runs`), never by this app importing them. The
sweeps app registers one in its AppConfig.ready() that reports a trial's evaluations to its pruner and stops
the run once pruned; the alerts app registers one that tells users when a metric becomes NaN or passes a
threshold (a metric event's record reaches watchers with `not_finite`: the keys whose values were NaN or
infinite, stored as null).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import numbers
import os
import time
from collections import deque

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.utils import timezone
from trainer.events import LIFECYCLE_KINDS, METRIC_KINDS, Sink

from rlweb.experiments import storage_use
from rlweb.experiments.files import save_with_file
from rlweb.experiments.history import rebuild_summary, summarize
from rlweb.experiments.live_changes import changes_to_replay, record_change
from rlweb.experiments.models import Checkpoint, Event, MetricBucket, Run, Video
from rlweb.experiments.redis_keys import TERMINAL_KINDS, changes_key, stop_key, stream_key
from rlweb.experiments.rows import insert, json_text
from rlweb.storage import STORAGE_ERRORS

logger = logging.getLogger(__name__)

STREAM_MAXLEN = 100_000  # entries kept per run stream (approximately), while the database cannot take them
STREAM_TAIL = 1_000  # stored events the stream keeps for followers that reconnect; older ones come from the database
RUNNING_STREAM_SECONDS = 24 * 3600  # a stream its sink stopped writing (a worker that died) expires after this
FINISHED_STREAM_SECONDS = 120  # a finished run's stream expires; its history stays in the database
BATCH_SIZE = 200  # events written to the database at once ...
FLUSH_SECONDS = 1.0  # ... or at least this often
ADD_COUNT = 500  # stream entries added at once
UNSENT_EVENTS = 20_000  # events kept for the stream while Redis is down (a few MB); older ones only in the database
REDIS_TIMEOUT = 2.0  # seconds the sink waits for Redis to connect or answer: a dead server costs this once ...
REDIS_BACKOFF = (0.5, 10.0)  # ... per back-off, which doubles from the first to the second after each failure
PENDING_LIMIT = 20_000  # events waiting for the database before the run gives up on it
EVENT_FIELDS = ("seq", "kind", "step", "time", "values")


def plain(value):
    """JSON-safe values: NumPy scalars become Python numbers, NaN and infinities become null."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def not_finite(values: dict) -> list[str]:
    """The keys of the values that are NaN or infinite (`plain` makes them null)."""
    return [str(key) for key, value in values.items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value)]


def sink_client() -> redis.Redis:
    """A client that fails fast, without retries of its own: the sink backs off instead (redis-py's
    defaults, 5 s timeouts and 10 retries, would stall training for up to a minute per event)."""
    return redis.Redis.from_url(settings.REDIS_URL, decode_responses=True, socket_connect_timeout=REDIS_TIMEOUT,
                                socket_timeout=REDIS_TIMEOUT, retry=Retry(NoBackoff(), 0))


# --- the hook: other apps watch the runs a worker trains ------------------------------------------------------

WATCHERS: list = []  # `watcher_for(sink)` callables, registered by other apps (the sweeps app, in its ready())


def watch_runs(watcher_for) -> None:
    """Register `watcher_for(sink)`, called for each sink a worker trains a run with (`worker_sink`). It returns
    None to leave the run alone, or a watcher: a trainer Sink that sees every event the run reports (`emit`,
    after the sink has it) and may ask the run to stop (`should_stop`, polled with the sink's). One that stops a
    run names the status the run ends with (`ends_as`, such as "pruned") and why (`reason`); the run's "finished"
    event carries both. A watcher that raises is logged and dropped: training goes on without it."""
    if watcher_for not in WATCHERS:
        WATCHERS.append(watcher_for)


def worker_sink(run: Run) -> "RedisSink":
    """The sink a worker trains `run` with (lifecycle.train): a RedisSink with the registered watchers."""
    sink = RedisSink(run)
    for watcher_for in WATCHERS:
        watcher = watcher_for(sink)
        if watcher is not None:
            sink.watchers.append(watcher)
    return sink


class DatabaseUnavailable(DatabaseError):
    """The database did not answer for longer than the sink waits: the run ends with this error."""


class RedisSink(Sink):
    """Streams a run's events to Redis, keeps them in the database with the summary the charts draw
    (history.py), and copies its checkpoints and videos into storage."""

    def __init__(self, run: Run, client: redis.Redis | None = None, batch_size: int = BATCH_SIZE,
                 flush_seconds: float = FLUSH_SECONDS, unsent_limit: int = UNSENT_EVENTS,
                 database_patience: float | None = None, stream_tail: int = STREAM_TAIL):
        self.run = run
        self.client = client or sink_client()
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self.stream_tail = stream_tail
        self.unsent: deque[tuple[int, str]] = deque(maxlen=unsent_limit)  # (seq, JSON) not in the stream yet
        self.redis_failures = 0  # in a row: the back-off grows with them
        self.redis_retry_at = 0.0  # monotonic time before which Redis is left alone
        self.stream_behind = False  # a Redis call failed: the database gets every event before the stream more
        # give up on the database before the lost-run reaper would take the run for dead
        self.database_patience = settings.HEARTBEAT_TIMEOUT / 2 if database_patience is None else database_patience
        self.database_down_since: float | None = None
        # after every seq an earlier attempt may have sent (lifecycle.forget_dead_attempt raised `last_seq`)
        self.seq = max(run.last_seq, run.stored_seq())
        self.steps_done = run.steps_done
        self.pending: list[tuple[dict, str]] = []  # events for the database: each record and its JSON
        self.last_flush = time.monotonic()
        self.ended = False  # a "finished" or "failed" event went out
        self.stop_requested = False  # set on SIGTERM or a cancel the heartbeat read (lifecycle.py)
        self.replay = changes_to_replay(run, run.stored_seq())  # hyperparameter changes this attempt owes
        self.changes_taken: set = set()  # ids handed to the runner (a change may come by Redis and by replay)
        self.watchers: list[Sink] = []  # other apps' (`watch_runs`); worker_sink adds them
        self.stopped_by: Sink | None = None  # the watcher that asked the run to stop
        self.after_start: dict | None = None  # sent right after "started" (a resumed attempt's "resumed" event)
        if self.seq == 0:
            self.redis_call(self.client.delete, stream_key(run.pk))
        if MetricBucket.objects.filter(run=run, last_seq__gt=self.seq).exists():
            rebuild_summary(run.pk)  # events were deleted (a restart or a resume): summarise what is left

    def emit(self, event: dict) -> None:
        kind = event["kind"]
        raw_values = event.get("values") or {}
        values = plain(raw_values)
        if kind == "finished" and self.stopped_by is not None:  # not a cancel: the watcher says how it ended
            values.update(status=self.stopped_by.ends_as, reason=self.stopped_by.reason)
        if kind == "checkpoint" and values.get("path"):
            values["checkpoint_id"] = self.store_checkpoint(values, int(event["step"]))
        if kind == "video" and values.get("path"):
            values["video_id"] = self.store_video(values, int(event["step"]))
        self.seq += 1
        record = {"seq": self.seq, "kind": kind, "step": int(event["step"]), "time": float(event["time"]),
                  "values": values}
        text = json_text(record)  # once, for the stream and the database (`plain` made the values JSON-safe)
        self.pending.append((record, text))
        self.unsent.append((self.seq, text))
        self.send_unsent()
        self.steps_done = max(self.steps_done, record["step"])
        if kind == "hyperparameters":
            try:
                record_change(self.run.pk, values, record["step"], self.seq)
            except DatabaseError as error:  # the event itself waits in `pending` for the database
                logger.warning("run %s: cannot record a hyperparameter change (%s)", self.run.pk, error)
        self.ended = self.ended or kind in TERMINAL_KINDS
        if kind in LIFECYCLE_KINDS or len(self.pending) >= self.batch_size or self.flush_due():
            self.flush()
        if self.watchers:  # they learn which values were NaN or infinite, stored as null (the alerts app)
            watched = {**record, "not_finite": not_finite(raw_values)} if kind in METRIC_KINDS else record
            for watcher in list(self.watchers):
                self.ask_watcher(watcher, "emit", watched)
        if kind == "started" and self.after_start is not None:  # on the run's clock, as "started" is
            note, self.after_start = self.after_start, None
            self.emit({**note, "time": record["time"]})

    def ask_watcher(self, watcher: Sink, method: str, *args):
        """`watcher.method(*args)`; a watcher that raises is logged and dropped (None)."""
        try:
            return getattr(watcher, method)(*args)
        except Exception:
            logger.exception("run %s: a watcher of its sink failed; training goes on without it", self.run.pk)
            self.watchers.remove(watcher)
            return None

    @property
    def ended_as(self) -> str | None:
        """The status that the watcher which stopped the run names (a sweep's "pruned"); None: none stopped it."""
        return self.stopped_by.ends_as if self.stopped_by is not None else None

    def should_stop(self) -> bool:
        """Polled about twice a second by the runner: also the moment to persist and beat the heart."""
        if self.flush_due():
            self.flush()
        if self.stop_requested or bool(self.redis_call(self.client.exists, stop_key(self.run.pk))):
            return True
        if self.stopped_by is None:
            self.stopped_by = next((watcher for watcher in list(self.watchers)
                                    if self.ask_watcher(watcher, "should_stop")), None)
        return self.stopped_by is not None

    def changes(self) -> list[dict]:
        """Polled with `should_stop`: the changes this attempt replays (first time only), then the ones asked for
        on the run's page since the last call (taken off the Redis list at once)."""
        def take():
            pipeline = self.client.pipeline()
            pipeline.lrange(changes_key(self.run.pk), 0, -1)
            pipeline.delete(changes_key(self.run.pk))
            return pipeline.execute()[0]

        asked, self.replay = self.replay + [json.loads(text) for text in self.redis_call(take) or []], []
        fresh = []
        for change in asked:
            if change.get("id") not in self.changes_taken:
                self.changes_taken.add(change.get("id"))
                fresh.append(change)
        return fresh

    def close(self) -> None:
        self.flush(wait=True)
        self.redis_retry_at = 0.0  # one last try, back-off or not
        self.send_unsent()
        self.redis_call(self.client.expire, stream_key(self.run.pk), FINISHED_STREAM_SECONDS)

    def trim_stream(self) -> None:
        """Every event is stored: the stream keeps only the last `stream_tail` of them (followers further behind
        read the database), and expires if this sink stops writing without a `close`."""
        pipeline = self.client.pipeline(transaction=False)
        pipeline.xtrim(stream_key(self.run.pk), minid=f"{max(0, self.seq - self.stream_tail) + 1}-0",
                       approximate=False)
        pipeline.expire(stream_key(self.run.pk), RUNNING_STREAM_SECONDS)
        self.redis_call(pipeline.execute)

    def flush_due(self) -> bool:
        return time.monotonic() - self.last_flush >= self.flush_seconds

    def flush(self, wait: bool = False) -> None:
        """Write pending events with their summary, the step count and the heartbeat to the database.
        When the database does not answer, the events stay pending for the next flush; DatabaseUnavailable
        once it has failed for `database_patience` seconds, or holds more than PENDING_LIMIT events. With
        `wait` (the run's end, also after such an error), this one tries every second for that long."""
        if self.database_down_since is not None and not wait and not self.flush_due():
            return  # it failed: try again once a flush is due, not at every event
        if wait:
            self.database_down_since = None
        while True:
            self.last_flush = time.monotonic()
            try:
                self.write_pending()
                self.database_down_since = None
                self.trim_stream()
                return
            except DatabaseError as error:
                close_old_connections()  # a broken connection is replaced at the next try
                now = time.monotonic()
                self.database_down_since = self.database_down_since or now
                down = now - self.database_down_since
                logger.warning("run %s: the database did not answer (%s); %d events wait", self.run.pk, error,
                               len(self.pending))
                if down >= self.database_patience or len(self.pending) > PENDING_LIMIT:
                    raise DatabaseUnavailable(
                        f"The database did not answer for {down:.0f} s ({error}); {len(self.pending)} events of "
                        "this run were waiting to be stored") from error
                if not wait:
                    return
                time.sleep(1.0)

    def write_pending(self) -> None:
        if self.pending:
            with transaction.atomic():  # a page reading the history sees the events and their summary together
                # one INSERT from a JSON array (rows.py): a third of bulk_create's time, with no model objects
                insert(Event, EVENT_FIELDS, "[" + ",".join(text for _, text in self.pending) + "]", run_id=self.run.pk)
                summarize(self.run.pk, [record for record, _ in self.pending])
            self.pending = []
        Run.objects.filter(pk=self.run.pk).update(steps_done=self.steps_done, heartbeat_at=timezone.now())
        self.run.steps_done = self.steps_done

    def send_unsent(self) -> None:
        """Add the buffered events to the stream, oldest first. After a Redis failure the database first gets
        every event: a restarted Redis lost the stream, and a follower reads what the stream lacks from
        the database. An id the stream already has (added before a reply was lost) answers an error, ignored."""
        if not self.unsent or time.monotonic() < self.redis_retry_at:
            return
        if self.stream_behind:
            self.flush()
            if self.pending:  # the database is away too: the stream waits for it
                self.redis_retry_at = self.last_flush + self.flush_seconds
                return

        def send():
            while self.unsent:
                batch = list(itertools.islice(self.unsent, ADD_COUNT))
                pipeline = self.client.pipeline(transaction=False)
                for seq, text in batch:
                    pipeline.xadd(stream_key(self.run.pk), {"event": text}, id=f"{seq}-0", maxlen=STREAM_MAXLEN,
                                  approximate=True)
                pipeline.execute(raise_on_error=False)
                for _ in batch:
                    self.unsent.popleft()
            self.stream_behind = False

        self.redis_call(send)

    def store_checkpoint(self, values: dict, step: int) -> int | None:
        """Copy a checkpoint the runner wrote into Django storage (one `best` and one `final` per run: the
        new one replaces the old once it is stored; an old one that jobs were asked on stays for them, marked
        `replaced`). A copy that fails is reported in the event's `error`, with no row and no file."""
        tag = values.get("tag") if values.get("tag") in Checkpoint.Tag.values else Checkpoint.Tag.PERIODIC
        step = int(values.get("step", step))
        name = f"step_{step}.zip" if tag == Checkpoint.Tag.PERIODIC else f"{tag}.zip"
        if tag == Checkpoint.Tag.PERIODIC and self.past_quota(values, "periodic checkpoint"):
            self.discard_local(values)
            return None
        checkpoint = self.store(Checkpoint(run=self.run, tag=tag, step=step), values, name, "checkpoint")
        if tag == Checkpoint.Tag.PERIODIC:
            self.discard_local(values)
        if checkpoint and tag != Checkpoint.Tag.PERIODIC:
            older = Checkpoint.objects.filter(run=self.run, tag=tag).exclude(pk=checkpoint.pk)
            self.retire(older)
        elif checkpoint and self.run.experiment.keep_checkpoints:
            self.retire(self.periodic_past(self.run.experiment.keep_checkpoints))
        return checkpoint and checkpoint.pk

    def periodic_past(self, keep: int):
        """The run's periodic checkpoints it offers past the latest `keep` (the experiment's `keep_checkpoints`)."""
        kept = self.run.current_checkpoints().filter(tag=Checkpoint.Tag.PERIODIC).order_by("-step", "-id")
        return Checkpoint.objects.filter(pk__in=list(kept.values_list("pk", flat=True)[keep:]))

    @staticmethod
    def retire(checkpoints) -> None:
        """Delete these checkpoints with their files; those jobs were asked on stay for them, marked `replaced`
        (the page lists them no more). A database error leaves them: the next checkpoint retires them too."""
        with contextlib.suppress(DatabaseError), transaction.atomic():
            checkpoints.filter(jobs__isnull=True).delete()
            checkpoints.update(replaced=True)

    def store_video(self, values: dict, step: int) -> int | None:
        """Copy an episode video the runner wrote into Django storage."""
        if self.past_quota(values, "video"):
            self.discard_local(values)
            return None
        video = Video(run=self.run, step=int(values.get("step", step)), episode_return=values.get("episode_return"))
        video = self.store(video, values, f"step_{video.step}.mp4", "video")
        self.discard_local(values)
        return video and video.pk

    def discard_local(self, values: dict) -> None:
        """Delete the worker's own copy of a periodic checkpoint or a video once storage has it (or it was dropped):
        the run's scratch folder would otherwise hold every one until the run ends. Best and final ones are
        rewritten in place, so they take one file each."""
        with contextlib.suppress(OSError):
            os.remove(values["path"])

    def past_quota(self, values: dict, what: str) -> bool:
        """Whether the file at `values["path"]` would take the run's owner past their storage quota
        (storage_use.py): then it is not stored, and the event's `error` says so in the run's log. Only periodic
        checkpoints and videos are asked about: a run always keeps its best and final checkpoints."""
        try:
            size = os.path.getsize(values["path"])
            owner = self.run.experiment.owner_id
            quota = storage_use.quota_bytes(owner)
            used = storage_use.used_bytes(owner) if quota is not None else 0
        except (OSError, DatabaseError):  # store() reports a file that is gone; the database is retried there
            return False
        if quota is None or used + size <= quota:
            return False
        values["error"] = (f"The {what} was not kept: your checkpoints and videos take {storage_use.describe(used)} "
                           f"of your storage quota of {storage_use.describe(quota)}. The run keeps its best and "
                           f"final checkpoints.")
        return True

    def store(self, row, values: dict, name: str, what: str):
        """Save the file at `values["path"]` into `row.file` and the row; None, with `values["error"]` set,
        when either fails (the media folder writes under a temporary name, and a bucket shows an object only
        once its upload is complete: nothing partial is left)."""
        try:
            save_with_file(row, values["path"], name)
        except (*STORAGE_ERRORS, DatabaseError) as error:
            logger.warning("run %s: cannot keep %s %s: %s", self.run.pk, what, values.get("path"), error)
            values["error"] = f"The {what} could not be stored: {error}"
            return None
        return row

    def redis_call(self, method, *args, **kwargs):
        """Redis carries only the live view: when it is down, training and the database history go on, and
        Redis is left alone for a back-off (None meanwhile)."""
        if time.monotonic() < self.redis_retry_at:
            return None
        try:
            result = method(*args, **kwargs)
        except redis.RedisError as error:
            self.stream_behind = True
            self.redis_failures += 1
            backoff = min(REDIS_BACKOFF[0] * 2 ** (self.redis_failures - 1), REDIS_BACKOFF[1])
            self.redis_retry_at = time.monotonic() + backoff
            logger.warning("run %s: Redis unavailable (%s); %d events wait for the live view, next try in %.1f s",
                           self.run.pk, error, len(self.unsent), backoff)
            return None
        self.redis_failures = 0
        return result
