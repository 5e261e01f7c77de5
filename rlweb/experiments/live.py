"""Live runs: the Redis sink a training task reports to, and the server-sent-events streams that follow it.

Every event a run reports gets a sequence number `seq` (1, 2, 3, ...). The same number is the event's
Redis stream id (`<seq>-0`), its `Event.seq` row in the database and its SSE `id:`, so a page that drew
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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import time
from collections import deque

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, models, transaction
from django.utils import timezone
from trainer.events import LIFECYCLE_KINDS, Sink

from rlweb.experiments.files import save_with_file
from rlweb.experiments.history import rebuild_summary, summarize
from rlweb.experiments.models import Checkpoint, Event, MetricBucket, Run, Video
from rlweb.storage import STORAGE_ERRORS

logger = logging.getLogger(__name__)

STREAM_MAXLEN = 100_000  # entries kept per run stream (approximately), while the database cannot take them
STREAM_TAIL = 1_000  # stored events the stream keeps for followers that reconnect; older ones come from the database
RUNNING_STREAM_SECONDS = 24 * 3600  # a stream its sink stopped writing (a worker that died) expires after this
FINISHED_STREAM_SECONDS = 120  # a finished run's stream expires; its history stays in the database
STOP_FLAG_SECONDS = 8 * 24 * 3600
BATCH_SIZE = 200  # events written to the database at once ...
FLUSH_SECONDS = 1.0  # ... or at least this often
READ_COUNT = 500  # stream entries read at once
CATCH_UP_COUNT = 2_000  # database rows read at once when the stream lacks events
TERMINAL_KINDS = ("finished", "failed")
UNSENT_EVENTS = 20_000  # events kept for the stream while Redis is down (a few MB); older ones only in the database
REDIS_TIMEOUT = 2.0  # seconds the sink waits for Redis to connect or answer: a dead server costs this once ...
REDIS_BACKOFF = (0.5, 10.0)  # ... per back-off, which doubles from the first to the second after each failure
PENDING_LIMIT = 20_000  # events waiting for the database before the run gives up on it
GAP_WAIT_SECONDS = 0.25  # a follower that finds a gap the database does not fill yet waits this long

RETRY_MESSAGE = "retry: 2000\n\n"
HEARTBEAT_MESSAGE = ": heartbeat\n\n"
RESET_MESSAGE = "event: reset\ndata: {}\n\n"  # the follower drew an attempt that was forgotten: reload the history


def stream_key(run_id: int) -> str:
    return f"rlweb:run:{run_id}:events"


def stop_key(run_id: int) -> str:
    return f"rlweb:run:{run_id}:stop"


def changes_key(run_id: int) -> str:
    """A list of hyperparameter changes asked for on the run's page (live_changes.py), read with the stop flag."""
    return f"rlweb:run:{run_id}:changes"


_clients: dict[str, redis.Redis] = {}


def blocking_read_timeout() -> float:
    """The socket timeout of a client whose reads block for up to `settings.SSE_HEARTBEAT_SECONDS` (XREAD BLOCK):
    longer than that. redis-py 8's default, 5 s, is the heartbeat itself: every read of a quiet stream failed with
    a timeout, and the stream slept 5 s more before it read again, so an event that came then reached its page up
    to 5 s late."""
    return settings.SSE_HEARTBEAT_SECONDS + 10


def redis_client() -> redis.Redis:
    """A shared client for `settings.REDIS_URL` (read at call time, so tests can point it elsewhere)."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, decode_responses=True, socket_timeout=blocking_read_timeout())
    return _clients[url]


def async_redis_client() -> redis.asyncio.Redis:
    """A client of the ASGI streams' own (redis.asyncio: one per stream, closed with it)."""
    return redis.asyncio.Redis.from_url(settings.REDIS_URL, decode_responses=True,
                                        socket_timeout=blocking_read_timeout())


def request_stop(run_id: int) -> None:
    """Ask a running run to stop; its sink sees the flag within about half a second."""
    redis_client().set(stop_key(run_id), "1", ex=STOP_FLAG_SECONDS)


def push_change(run_id: int, change: dict, client: redis.Redis | None = None) -> None:
    """Hand a checked change ({"id", "values"}) to the run's worker; its sink takes it within half a second."""
    pipeline = (client or redis_client()).pipeline()
    pipeline.rpush(changes_key(run_id), json.dumps(change))
    pipeline.expire(changes_key(run_id), STOP_FLAG_SECONDS)
    pipeline.execute()


def changes_to_replay(run: Run, stored_seq: int) -> list[dict]:
    """The recorded changes an attempt that starts after event `stored_seq` must apply: the ones its worker
    never applied (at once), and the ones applied after that event, whose report a resume forgot with the rest of
    the interrupted attempt (at the step they were applied at; the checkpoint's config holds the earlier ones)."""
    return [{"id": entry["id"], "values": entry["values"], "step": entry.get("step")}
            for entry in run.live_changes if "error" not in entry and (entry.get("seq") or math.inf) > stored_seq]


def record_change(run_id: int, values: dict, step: int, seq: int) -> None:
    """Write what the runner did with a change (a `hyperparameters` event) into its entry of `Run.live_changes`:
    the step and seq, and the old and new values or the error. The row is locked (the page may append a change)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).only("live_changes").first()
        if run is None:
            return
        entry = next((entry for entry in run.live_changes if entry.get("id") == values.get("id")), None)
        if entry is None:  # asked for without the page (a test, the shell): recorded as it is
            entry = {"id": values.get("id"), "values": {name: change["new"] for name, change in
                                                        (values.get("changes") or {}).items()}}
            run.live_changes.append(entry)
        entry.update(step=step, seq=seq)
        if "error" in values:
            entry.update(error=values["error"], errors=values.get("errors") or {})
            entry.pop("changes", None)
        else:
            entry["changes"] = values.get("changes") or {}
        run.save(update_fields=["live_changes"])


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


def sink_client() -> redis.Redis:
    """A client that fails fast, without retries of its own: the sink backs off instead (redis-py's
    defaults, 5 s timeouts and 10 retries, would stall training for up to a minute per event)."""
    return redis.Redis.from_url(settings.REDIS_URL, decode_responses=True, socket_connect_timeout=REDIS_TIMEOUT,
                                socket_timeout=REDIS_TIMEOUT, retry=Retry(NoBackoff(), 0))


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
        # give up on the database before the lost-run sweep would take the run for dead
        self.database_patience = settings.HEARTBEAT_TIMEOUT / 2 if database_patience is None else database_patience
        self.database_down_since: float | None = None
        # after every seq an earlier attempt may have sent (lifecycle.forget_dead_attempt raised `last_seq`)
        self.seq = max(run.last_seq, run.stored_seq())
        self.steps_done = run.steps_done
        self.pending: list[Event] = []
        self.last_flush = time.monotonic()
        self.ended = False  # a "finished" or "failed" event went out
        self.stop_requested = False  # set on SIGTERM or a cancel the heartbeat read (lifecycle.py)
        self.replay = changes_to_replay(run, run.stored_seq())  # hyperparameter changes this attempt owes
        self.changes_taken: set = set()  # ids handed to the runner (a change may come by Redis and by replay)
        if self.seq == 0:
            self.redis_call(self.client.delete, stream_key(run.pk))
        if MetricBucket.objects.filter(run=run, last_seq__gt=self.seq).exists():
            rebuild_summary(run.pk)  # events were deleted (a restart or a resume): summarise what is left

    def emit(self, event: dict) -> None:
        kind = event["kind"]
        values = plain(event.get("values") or {})
        if kind == "checkpoint" and values.get("path"):
            values["checkpoint_id"] = self.store_checkpoint(values, int(event["step"]))
        if kind == "video" and values.get("path"):
            values["video_id"] = self.store_video(values, int(event["step"]))
        self.seq += 1
        record = {"seq": self.seq, "kind": kind, "step": int(event["step"]), "time": float(event["time"]),
                  "values": values}
        self.pending.append(Event(run_id=self.run.pk, **record))
        self.unsent.append((self.seq, json.dumps(record)))
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

    def should_stop(self) -> bool:
        """Polled about twice a second by the runner: also the moment to persist and beat the heart."""
        if self.flush_due():
            self.flush()
        return self.stop_requested or bool(self.redis_call(self.client.exists, stop_key(self.run.pk)))

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
                Event.objects.bulk_create(self.pending)
                summarize(self.run.pk, self.pending)
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
                batch = list(itertools.islice(self.unsent, READ_COUNT))
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
        checkpoint = self.store(Checkpoint(run=self.run, tag=tag, step=step), values, name, "checkpoint")
        if checkpoint and tag != Checkpoint.Tag.PERIODIC:
            with contextlib.suppress(DatabaseError), transaction.atomic():  # (gone: the next one replaces both)
                older = Checkpoint.objects.filter(run=self.run, tag=tag).exclude(pk=checkpoint.pk)
                older.filter(jobs__isnull=True).delete()
                older.update(replaced=True)
        return checkpoint and checkpoint.pk

    def store_video(self, values: dict, step: int) -> int | None:
        """Copy an episode video the runner wrote into Django storage."""
        video = Video(run=self.run, step=int(values.get("step", step)), episode_return=values.get("episode_return"))
        video = self.store(video, values, f"step_{video.step}.mp4", "video")
        return video and video.pk

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


# --- following a run: server-sent events ------------------------------------------------------------------

def event_message(record: dict) -> str:
    return f"id: {record['seq']}\ndata: {json.dumps(record)}\n\n"


def end_message(status: str) -> str:
    return f"event: end\ndata: {json.dumps({'status': status})}\n\n"


class Messages:
    """The SSE messages of one run's stream (`follow`): each event with its seq as its id, `end`, `reset`."""

    retry = RETRY_MESSAGE
    heartbeat = HEARTBEAT_MESSAGE
    reset = RESET_MESSAGE

    def event(self, record: dict) -> str:
        return event_message(record)

    def end(self, status: str) -> str:
        return end_message(status)


class RunMessages(Messages):
    """The messages of one of several runs followed over one stream (`follow_runs`): each names its run and none
    has an id (the follower resumes each run from its own last seq); the stream sends the retry hint and the
    heartbeats, once for all."""

    retry = heartbeat = ""

    def __init__(self, run_id: int):
        self.run_id = run_id
        self.reset = f"event: reset\ndata: {json.dumps({'run': run_id})}\n\n"

    def event(self, record: dict) -> str:
        return f"data: {json.dumps({'run': self.run_id, **record})}\n\n"

    def end(self, status: str) -> str:
        return f"event: end\ndata: {json.dumps({'run': self.run_id, 'status': status})}\n\n"


ONE_RUN = Messages()


def stream_records(reply) -> list[dict]:
    """The events in an XREAD reply."""
    return [json.loads(fields["event"]) for _, entries in (reply or []) for _, fields in entries]


def run_status(run_id: int, last_seq: int = 0) -> str:
    """The run's status; "reset" when `last_seq` belongs to an interrupted attempt that a resume forgot."""
    row = Run.objects.filter(pk=run_id).values_list("status", "forgotten_seqs").first()
    if row is None:
        return Run.Status.LOST
    status, forgotten = row
    return "reset" if any(after < last_seq <= through for after, through in forgotten) else status


def forgotten_gap(run_id: int, last_seq: int, records: list[dict]) -> bool:
    """Whether the stream jumps past `last_seq` because a resume forgot it (the follower drew a dead attempt)."""
    return bool(records) and records[0]["seq"] > last_seq + 1 and run_status(run_id, last_seq) == "reset"


def in_order(records: list[dict], last_seq: int) -> list[dict]:
    """The records after `last_seq` that follow on from it one by one, up to the first one missing."""
    following = []
    for record in records:
        if record["seq"] == (following[-1]["seq"] if following else last_seq) + 1:
            following.append(record)
        elif record["seq"] > last_seq:
            break
    return following


def catch_up(run_id: int, last_seq: int, records: list[dict]) -> list[dict]:
    """The events after `last_seq`, none missing: the stream records when they follow on, else first the
    database rows before the stream's next record (events the stream lacks: trimmed, expired, lost in a
    Redis restart or never added during an outage)."""
    following = in_order(records, last_seq)
    if following:
        return following
    rows = Event.objects.filter(run_id=run_id, seq__gt=last_seq).order_by("seq")
    later = [record for record in records if record["seq"] > last_seq]
    if later:
        rows = rows.filter(seq__lt=later[0]["seq"])
    stored = [row.as_dict() for row in rows[:CATCH_UP_COUNT]]  # stored events miss none but forgotten ones
    if len(stored) == CATCH_UP_COUNT:
        return stored  # more remain stored: read them before the stream records
    return stored + in_order(later, past_forgotten(run_id, stored[-1]["seq"] if stored else last_seq))


def past_forgotten(run_id: int, seq: int) -> int:
    """`seq`, or the last seq of the range a resume forgot right after it: the next attempt numbers on from there."""
    forgotten = Run.objects.filter(pk=run_id).values_list("forgotten_seqs", flat=True).first() or []
    for after, through in sorted(forgotten):
        if after <= seq < through:
            seq = through
    return seq


def follow(run_id: int, last_seq: int, messages: Messages = ONE_RUN):
    """SSE messages for the events after `last_seq`, until the run ends (WSGI: a sync generator).

    A comment goes out every `settings.SSE_HEARTBEAT_SECONDS` while nothing happens."""
    client = redis_client()
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    yield messages.retry
    records = []
    while True:
        if not records:  # only a quiet stream may belong to a run that ended without a final event
            status = run_status(run_id, last_seq)
            if status == "reset":
                yield messages.reset
                return
        finished = status in Run.FINISHED
        try:
            reply = client.xread({stream_key(run_id): f"{last_seq}-0"}, count=READ_COUNT,
                                 block=None if finished else int(heartbeat_seconds * 1000))
        except redis.RedisError:
            reply = None
            time.sleep(0 if finished else heartbeat_seconds)
        records = stream_records(reply)
        if forgotten_gap(run_id, last_seq, records):
            yield messages.reset
            return
        records = catch_up(run_id, last_seq, records)
        if reply and not records:  # the stream is ahead of the database (a Redis restart): it writes soon
            time.sleep(GAP_WAIT_SECONDS)
        for record in records:
            yield messages.event(record)
            last_seq = record["seq"]
            if record["kind"] in TERMINAL_KINDS:
                yield messages.end(record["values"].get("status", record["kind"]))
                return
        if finished and not records:
            yield messages.end(status)
            return
        if not records:
            yield messages.heartbeat


async def read_database(read, *args):
    """`read(*args)` in the request's thread, then its database connection closed: an open live page must not
    hold one of the database's connections for hours (PostgreSQL's default 100 ran out at about 100 open
    pages). Inside a transaction (the tests') the connection stays."""
    def read_and_close():
        try:
            return read(*args)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return await sync_to_async(read_and_close)()


async def follow_async(run_id: int, last_seq: int, messages: Messages = ONE_RUN):
    """The same messages as `follow`, for ASGI: an async generator over redis.asyncio."""
    client = async_redis_client()
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    try:
        yield messages.retry
        records = []
        while True:
            if not records:  # only a quiet stream may belong to a run that ended without a final event
                status = await read_database(run_status, run_id, last_seq)
                if status == "reset":
                    yield messages.reset
                    return
            finished = status in Run.FINISHED
            try:
                reply = await client.xread({stream_key(run_id): f"{last_seq}-0"}, count=READ_COUNT,
                                           block=None if finished else int(heartbeat_seconds * 1000))
            except redis.RedisError:
                reply = None
                await asyncio.sleep(0 if finished else heartbeat_seconds)
            streamed = stream_records(reply)
            if streamed and await read_database(forgotten_gap, run_id, last_seq, streamed):
                yield messages.reset
                return
            records = in_order(streamed, last_seq)
            if not records:  # the database has events the stream lacks (or none came)
                records = await read_database(catch_up, run_id, last_seq, streamed)
                if streamed and not records:  # the stream is ahead of the database (a Redis restart)
                    await asyncio.sleep(GAP_WAIT_SECONDS)
            for record in records:
                yield messages.event(record)
                last_seq = record["seq"]
                if record["kind"] in TERMINAL_KINDS:
                    yield messages.end(record["values"].get("status", record["kind"]))
                    return
            if finished and not records:
                yield messages.end(status)
                return
            if not records:
                yield messages.heartbeat
    finally:
        await client.aclose()


# --- following several runs over one connection: run pages in tabs ---------------------------------------------
# A browser opens at most 6 HTTP/1.1 connections to a site: a seventh run page following its own stream would wait
# for one, and so would every other request of the site. The run pages of a browser share one stream instead
# (static/experiments/live_worker.js, a SharedWorker): each run's `follow`, its messages naming the run, merged.

MAX_FOLLOWED_RUNS = 50


def follow_runs(positions: dict[int, int]):
    """SSE messages for the events of several runs, each after its seq in `positions`, over one connection (WSGI:
    each run's `follow` in a thread of its own): every message names its run, a heartbeat goes out while none
    comes, and the stream ends once every run has ended."""
    import queue
    import threading

    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    arrived: queue.Queue = queue.Queue()
    closed = threading.Event()

    def pump(run_id: int, last_seq: int) -> None:
        try:
            for message in follow(run_id, last_seq, RunMessages(run_id)):
                if closed.is_set():
                    return
                if message:
                    arrived.put(message)
        except Exception as error:  # the stream fails as one run's would
            arrived.put(error)
        finally:
            connection.close()
            arrived.put(None)

    threads = [threading.Thread(target=pump, args=item, daemon=True) for item in positions.items()]
    for thread in threads:
        thread.start()
    try:
        yield RETRY_MESSAGE
        running = len(threads)
        while running:
            try:
                message = arrived.get(timeout=heartbeat_seconds)
            except queue.Empty:
                yield HEARTBEAT_MESSAGE
                continue
            if message is None:
                running -= 1
            elif isinstance(message, Exception):
                raise message
            else:
                yield message
    finally:
        closed.set()  # a follower that disconnected: each thread stops at its run's next message (a heartbeat at most)


async def follow_runs_async(positions: dict[int, int]):
    """The same messages as `follow_runs`, for ASGI: each run's `follow_async` in a task of its own."""
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    arrived: asyncio.Queue = asyncio.Queue()

    async def pump(run_id: int, last_seq: int) -> None:
        try:
            async for message in follow_async(run_id, last_seq, RunMessages(run_id)):
                if message:
                    await arrived.put(message)
        except Exception as error:  # the stream fails as one run's would
            await arrived.put(error)
        finally:
            await arrived.put(None)

    pumps = [asyncio.create_task(pump(run_id, last_seq)) for run_id, last_seq in positions.items()]
    try:
        yield RETRY_MESSAGE
        running = len(pumps)
        while running:
            try:
                message = await asyncio.wait_for(arrived.get(), heartbeat_seconds)
            except asyncio.TimeoutError:
                yield HEARTBEAT_MESSAGE
                continue
            if message is None:
                running -= 1
            elif isinstance(message, Exception):
                raise message
            else:
                yield message
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


# --- watching several runs: the compare page ------------------------------------------------------------

def unfinished_positions(run_ids: list[int]) -> dict[int, int]:
    """Each run of `run_ids` that has not finished, with the last seq the database holds (0: none yet)."""
    unfinished = Run.objects.filter(pk__in=run_ids).exclude(status__in=Run.FINISHED).values_list("pk", flat=True)
    positions = dict.fromkeys(unfinished, 0)
    stored = (Event.objects.filter(run_id__in=positions).values("run_id").annotate(last=models.Max("seq"))
              .values_list("run_id", "last"))
    positions.update(stored)
    return positions


class Watch:
    """Where a watch of several runs stands (`watch` and `watch_async`): each unfinished run's last seen seq."""

    def __init__(self, positions: dict[int, int]):
        self.positions = positions
        self.runs_by_key = {stream_key(run_id): run_id for run_id in positions}

    def streams(self) -> dict[str, str]:
        return {stream_key(run_id): f"{seq}-0" for run_id, seq in self.positions.items()}

    def step(self, reply, unfinished: dict[int, int] | None) -> str:
        """The message for an XREAD reply (`unfinished`: the runs still unfinished, read when it was empty),
        after which the runs that ended are no longer watched."""
        changed, ended = {}, set()
        for key, entries in reply or []:
            run_id = self.runs_by_key[key]
            for record in stream_records([(key, entries)]):
                changed[run_id] = max(changed.get(run_id, 0), record["seq"])
                if record["kind"] in TERMINAL_KINDS:
                    ended.add(run_id)
        if unfinished is not None:
            ended = set(self.positions) - set(unfinished)
        self.positions.update({run_id: seq for run_id, seq in changed.items() if seq > self.positions[run_id]})
        for run_id in ended:
            self.positions.pop(run_id)
        if not (changed or ended):
            return HEARTBEAT_MESSAGE
        return f"event: runs\ndata: {json.dumps({'changed': changed, 'ended': sorted(ended)})}\n\n"


def watch(run_ids: list[int]):
    """SSE for a page that shows several runs (the compare page), over one connection (WSGI: a sync generator):
    a `runs` message each time some of the unfinished ones report events (`changed`: run -> its latest seq) or
    end (`ended`), from the events the database holds on; `end` once none is left. The page fetches what it
    draws itself; this only says when. A run that ends without a final event (lost, cancelled while queued)
    is noticed when the streams are quiet for `settings.SSE_HEARTBEAT_SECONDS`."""
    client = redis_client()
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    yield RETRY_MESSAGE
    runs = Watch(unfinished_positions(run_ids))
    while runs.positions:
        try:
            reply = client.xread(runs.streams(), count=READ_COUNT, block=int(heartbeat_seconds * 1000))
        except redis.RedisError:
            reply = None
            time.sleep(heartbeat_seconds)
        yield runs.step(reply, None if reply else unfinished_positions(list(runs.positions)))
    yield end_message("finished")


async def watch_async(run_ids: list[int]):
    """The same messages as `watch`, for ASGI: an async generator over redis.asyncio."""
    client = async_redis_client()
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    try:
        yield RETRY_MESSAGE
        runs = Watch(await read_database(unfinished_positions, run_ids))
        while runs.positions:
            try:
                reply = await client.xread(runs.streams(), count=READ_COUNT, block=int(heartbeat_seconds * 1000))
            except redis.RedisError:
                reply = None
                await asyncio.sleep(heartbeat_seconds)
            unfinished = None if reply else await read_database(unfinished_positions, list(runs.positions))
            yield runs.step(reply, unfinished)
        yield end_message("finished")
    finally:
        await client.aclose()
