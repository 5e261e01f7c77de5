"""Live runs: the Redis sink a training task reports to, and the server-sent-events streams that follow it.

Every event a run reports gets a sequence number `seq` (1, 2, 3, ...). The same number is the event's
Redis stream id (`<seq>-0`), its `Event.seq` row in the database and its SSE `id:`, so a page that drew
the stored history up to `seq` N and then follows the stream from N never loses or doubles a point.
The stream is capped; events it no longer holds (trimmed, expired, or lost in a Redis restart) are
read back from the database.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from pathlib import Path

import redis
import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.utils import timezone
from trainer.events import LIFECYCLE_KINDS, Sink

from rlweb.experiments.history import rebuild_summary, summarize
from rlweb.experiments.models import Checkpoint, Event, MetricBucket, Run, Video

logger = logging.getLogger(__name__)

STREAM_MAXLEN = 100_000  # entries kept per run stream (approximately)
FINISHED_STREAM_SECONDS = 24 * 3600  # a finished run's stream expires; its history stays in the database
STOP_FLAG_SECONDS = 8 * 24 * 3600
BATCH_SIZE = 200  # events written to the database at once ...
FLUSH_SECONDS = 1.0  # ... or at least this often
READ_COUNT = 500  # stream entries read at once
CATCH_UP_COUNT = 2_000  # database rows read at once when the stream lacks events
TERMINAL_KINDS = ("finished", "failed")

RETRY_MESSAGE = "retry: 2000\n\n"
HEARTBEAT_MESSAGE = ": heartbeat\n\n"


def stream_key(run_id: int) -> str:
    return f"rlweb:run:{run_id}:events"


def stop_key(run_id: int) -> str:
    return f"rlweb:run:{run_id}:stop"


_clients: dict[str, redis.Redis] = {}


def redis_client() -> redis.Redis:
    """A shared client for `settings.REDIS_URL` (read at call time, so tests can point it elsewhere)."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, decode_responses=True)
    return _clients[url]


def request_stop(run_id: int) -> None:
    """Ask a running run to stop; its sink sees the flag within about half a second."""
    redis_client().set(stop_key(run_id), "1", ex=STOP_FLAG_SECONDS)


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


class RedisSink(Sink):
    """Streams a run's events to Redis, keeps them in the database with the summary the charts draw
    (history.py), and copies its checkpoints and videos into storage."""

    def __init__(self, run: Run, client: redis.Redis | None = None, batch_size: int = BATCH_SIZE,
                 flush_seconds: float = FLUSH_SECONDS):
        self.run = run
        self.client = client or redis_client()
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self.seq = Event.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first() or 0
        self.steps_done = run.steps_done
        self.pending: list[Event] = []
        self.last_flush = time.monotonic()
        self.ended = False  # a "finished" or "failed" event went out
        self.stop_requested = False  # set when the worker is told to shut down (tasks.stop_on_sigterm)
        if self.seq == 0:
            self.redis_call(self.client.delete, stream_key(run.pk))
        if MetricBucket.objects.filter(run=run, last_seq__gt=self.seq).exists():
            rebuild_summary(run.pk)  # events were deleted (a restart or a resume): summarise what is left

    def emit(self, event: dict) -> None:
        kind = event["kind"]
        values = plain(event.get("values") or {})
        if kind == "checkpoint":
            values["checkpoint_id"] = self.store_checkpoint(values, int(event["step"]))
        if kind == "video" and values.get("path"):
            values["video_id"] = self.store_video(values, int(event["step"]))
        self.seq += 1
        record = {"seq": self.seq, "kind": kind, "step": int(event["step"]), "time": float(event["time"]),
                  "values": values}
        self.redis_call(self.client.xadd, stream_key(self.run.pk), {"event": json.dumps(record)},
                        id=f"{self.seq}-0", maxlen=STREAM_MAXLEN, approximate=True)
        self.pending.append(Event(run_id=self.run.pk, **record))
        self.steps_done = max(self.steps_done, record["step"])
        self.ended = self.ended or kind in TERMINAL_KINDS
        if kind in LIFECYCLE_KINDS or len(self.pending) >= self.batch_size or self.flush_due():
            self.flush()

    def should_stop(self) -> bool:
        """Polled about twice a second by the runner: also the moment to persist and beat the heart."""
        if self.flush_due():
            self.flush()
        return self.stop_requested or bool(self.redis_call(self.client.exists, stop_key(self.run.pk)))

    def close(self) -> None:
        self.flush()
        self.redis_call(self.client.expire, stream_key(self.run.pk), FINISHED_STREAM_SECONDS)

    def flush_due(self) -> bool:
        return time.monotonic() - self.last_flush >= self.flush_seconds

    def flush(self) -> None:
        """Write pending events with their summary, the step count and the heartbeat to the database."""
        if self.pending:
            with transaction.atomic():  # a page reading the history sees the events and their summary together
                Event.objects.bulk_create(self.pending)
                summarize(self.run.pk, self.pending)
            self.pending = []
        Run.objects.filter(pk=self.run.pk).update(steps_done=self.steps_done, heartbeat_at=timezone.now())
        self.run.steps_done = self.steps_done
        self.last_flush = time.monotonic()

    def store_checkpoint(self, values: dict, step: int) -> int | None:
        """Copy a checkpoint the runner wrote into Django storage. One `best` and one `final` per run."""
        tag = values.get("tag") if values.get("tag") in Checkpoint.Tag.values else Checkpoint.Tag.PERIODIC
        step = int(values.get("step", step))
        name = f"step_{step}.zip" if tag == Checkpoint.Tag.PERIODIC else f"{tag}.zip"
        if tag != Checkpoint.Tag.PERIODIC:
            Checkpoint.objects.filter(run=self.run, tag=tag).delete()
        try:
            with Path(values["path"]).open("rb") as file:
                checkpoint = Checkpoint(run=self.run, tag=tag, step=step)
                checkpoint.file.save(name, File(file), save=True)
        except (KeyError, OSError) as error:
            logger.warning("run %s: cannot keep checkpoint %s: %s", self.run.pk, values.get("path"), error)
            return None
        return checkpoint.pk

    def store_video(self, values: dict, step: int) -> int | None:
        """Copy an episode video the runner wrote into Django storage."""
        try:
            with Path(values["path"]).open("rb") as file:
                video = Video(run=self.run, step=int(values.get("step", step)),
                              episode_return=values.get("episode_return"))
                video.file.save(f"step_{video.step}.mp4", File(file), save=True)
        except (KeyError, OSError) as error:
            logger.warning("run %s: cannot keep video %s: %s", self.run.pk, values.get("path"), error)
            return None
        return video.pk

    def redis_call(self, method, *args, **kwargs):
        """Redis carries only the live view: when it is down, training and the database history go on."""
        try:
            return method(*args, **kwargs)
        except redis.RedisError as error:
            logger.warning("run %s: Redis unavailable (%s); the live view will catch up", self.run.pk, error)
            return None


# --- following a run: server-sent events ------------------------------------------------------------------

def event_message(record: dict) -> str:
    return f"id: {record['seq']}\ndata: {json.dumps(record)}\n\n"


def end_message(status: str) -> str:
    return f"event: end\ndata: {json.dumps({'status': status})}\n\n"


def stream_records(reply) -> list[dict]:
    """The events in an XREAD reply."""
    return [json.loads(fields["event"]) for _, entries in (reply or []) for _, fields in entries]


def run_status(run_id: int) -> str:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first() or Run.Status.LOST


def contiguous(records: list[dict], last_seq: int) -> bool:
    """Whether stream records follow on from `last_seq` with nothing missing (no database read needed)."""
    return bool(records) and records[0]["seq"] <= last_seq + 1


def catch_up(run_id: int, last_seq: int, records: list[dict]) -> list[dict]:
    """Prepend the events between `last_seq` and the first stream record that only the database has."""
    if contiguous(records, last_seq):
        return [record for record in records if record["seq"] > last_seq]
    rows = Event.objects.filter(run_id=run_id, seq__gt=last_seq).order_by("seq")
    if records:
        rows = rows.filter(seq__lt=records[0]["seq"])
    stored = [row.as_dict() for row in rows[:CATCH_UP_COUNT]]
    if len(stored) == CATCH_UP_COUNT:
        return stored  # more remain stored: read them before the stream records
    return stored + records


def follow(run_id: int, last_seq: int):
    """SSE messages for the events after `last_seq`, until the run ends (WSGI: a sync generator).

    A comment goes out every `settings.SSE_HEARTBEAT_SECONDS` while nothing happens."""
    client = redis_client()
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    yield RETRY_MESSAGE
    records = []
    while True:
        if not records:  # only a quiet stream may belong to a run that ended without a final event
            status = run_status(run_id)
        finished = status in Run.FINISHED
        try:
            reply = client.xread({stream_key(run_id): f"{last_seq}-0"}, count=READ_COUNT,
                                 block=None if finished else int(heartbeat_seconds * 1000))
        except redis.RedisError:
            reply = None
            time.sleep(0 if finished else heartbeat_seconds)
        records = catch_up(run_id, last_seq, stream_records(reply))
        for record in records:
            yield event_message(record)
            last_seq = record["seq"]
            if record["kind"] in TERMINAL_KINDS:
                yield end_message(record["values"].get("status", record["kind"]))
                return
        if finished and not records:
            yield end_message(status)
            return
        if not records:
            yield HEARTBEAT_MESSAGE


async def follow_async(run_id: int, last_seq: int):
    """The same messages as `follow`, for ASGI: an async generator over redis.asyncio."""
    client = redis.asyncio.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    try:
        yield RETRY_MESSAGE
        records = []
        while True:
            if not records:  # only a quiet stream may belong to a run that ended without a final event
                status = await sync_to_async(run_status)(run_id)
            finished = status in Run.FINISHED
            try:
                reply = await client.xread({stream_key(run_id): f"{last_seq}-0"}, count=READ_COUNT,
                                           block=None if finished else int(heartbeat_seconds * 1000))
            except redis.RedisError:
                reply = None
                await asyncio.sleep(0 if finished else heartbeat_seconds)
            records = stream_records(reply)
            if not contiguous(records, last_seq):  # the database has events the stream lacks (or none came)
                records = await sync_to_async(catch_up)(run_id, last_seq, records)
            records = [record for record in records if record["seq"] > last_seq]
            for record in records:
                yield event_message(record)
                last_seq = record["seq"]
                if record["kind"] in TERMINAL_KINDS:
                    yield end_message(record["values"].get("status", record["kind"]))
                    return
            if finished and not records:
                yield end_message(status)
                return
            if not records:
                yield HEARTBEAT_MESSAGE
    finally:
        await client.aclose()
