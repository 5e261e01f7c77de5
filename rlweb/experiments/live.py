"""The live streams of the pages (server-sent events): a run's events as its sink (sink.py) adds them to its Redis
stream, several runs' over one connection (run pages in tabs), and when any of a compare page's runs reports.

Each event's SSE `id:` is its seq, which is also its Redis stream id (`<seq>-0`) and its `Event.seq` row, so a page
that drew the stored history up to seq N and then follows from N (`Last-Event-ID` after a reconnect) never loses or
doubles a point. Events the stream no longer holds (trimmed, expired, lost in a Redis restart, or never added during
an outage) are read back from the database.

The streams are async generators over redis.asyncio, written once: the ASGI server (uvicorn, `make run`) sends each
message as it comes and an open page holds no thread, only a task; its database reads go through `read_database`.
(A WSGI server would read an async stream to its end before sending anything: live pages need the ASGI server.
Django's test Client reads a stream that ends, such as a finished run's, whole; the AsyncClient reads it a message
at a time.)
"""

from __future__ import annotations

import asyncio
import json

import redis
import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, models

from rlweb.experiments.models import Event, Run
from rlweb.experiments.redis_keys import TERMINAL_KINDS, blocking_read_timeout, stream_key
from rlweb.experiments.rows import json_loads

READ_COUNT = 500  # stream entries read at once
CATCH_UP_COUNT = 2_000  # database rows read at once when the stream lacks events
GAP_WAIT_SECONDS = 0.25  # a follower that finds a gap the database does not fill yet waits this long

RETRY_MESSAGE = "retry: 2000\n\n"
HEARTBEAT_MESSAGE = ": heartbeat\n\n"
RESET_MESSAGE = "event: reset\ndata: {}\n\n"  # the follower drew an attempt that was forgotten: reload the history


def async_redis_client() -> redis.asyncio.Redis:
    """A stream's own client (redis.asyncio: one per stream, closed with it)."""
    return redis.asyncio.Redis.from_url(settings.REDIS_URL, decode_responses=True,
                                        socket_timeout=blocking_read_timeout())


# --- following a run: server-sent events ------------------------------------------------------------------

class Streamed(dict):
    """A record read from a run's Redis stream, with the JSON it was read from (`text`), which its message sends on
    as it is: a run at 1,000 points a second spares a json.dumps of each of them."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        super().__init__(json_loads(text))
        self.text = text


def record_json(record: dict) -> str:
    return record.text if isinstance(record, Streamed) else json.dumps(record)


def event_message(record: dict) -> str:
    return f"id: {record['seq']}\ndata: {record_json(record)}\n\n"


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
        return f'data: {{"run": {self.run_id}, {record_json(record)[1:]}\n\n'  # a record is a JSON object: {"seq": ...

    def end(self, status: str) -> str:
        return f"event: end\ndata: {json.dumps({'run': self.run_id, 'status': status})}\n\n"


ONE_RUN = Messages()


def stream_records(reply) -> list[dict]:
    """The events in an XREAD reply."""
    return [Streamed(fields["event"]) for _, entries in (reply or []) for _, fields in entries]


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


async def follow(run_id: int, last_seq: int, messages: Messages = ONE_RUN):
    """SSE messages for the events after `last_seq`, until the run ends (the events of one read together, as one
    string); a comment every `settings.SSE_HEARTBEAT_SECONDS` while nothing happens."""
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
            sent = []  # the read's messages go out as one chunk: one write, not one per event (10,000 a second)
            for record in records:
                sent.append(messages.event(record))
                last_seq = record["seq"]
                if record["kind"] in TERMINAL_KINDS:
                    yield "".join(sent)
                    yield messages.end(record["values"].get("status", record["kind"]))
                    return
            if sent:
                yield "".join(sent)
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


async def follow_runs(positions: dict[int, int]):
    """SSE messages for the events of several runs, each after its seq in `positions`, over one connection (each
    run's `follow` in a task of its own): every message names its run, a heartbeat goes out while none comes, and
    the stream ends once every run has ended. A follower that hangs up cancels the tasks."""
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    arrived: asyncio.Queue = asyncio.Queue()

    async def pump(run_id: int, last_seq: int) -> None:
        try:
            async for message in follow(run_id, last_seq, RunMessages(run_id)):
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
        # cancelled again until every pump has ended: Python 3.11's wait_for, which redis-py's reads and writes run
        # in, can swallow a cancel that comes as its inner task ends, and the pump would follow its run for good
        while running_pumps := [task for task in pumps if not task.done()]:
            for task in running_pumps:
                task.cancel()
            await asyncio.wait(running_pumps, timeout=1)


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
    """Where a watch of several runs stands (`watch`): each unfinished run's last seen seq."""

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


async def watch(run_ids: list[int], drawn: dict[int, int] | None = None):
    """SSE for a page that shows several runs (the compare page), over one connection: a `runs` message each time
    some of the unfinished ones report events (`changed`: run -> its latest seq) or end (`ended`), from the events
    the database holds on, or from what the page says it drew (`drawn`: run -> seq) when that is less, so that
    events stored between its fetch and this stream are announced at once; `end` once none is left. The page fetches what it draws itself; this only says when. A
    run that ends without a final event (lost, cancelled while queued) is noticed when the streams are quiet for
    `settings.SSE_HEARTBEAT_SECONDS`."""
    client = async_redis_client()
    heartbeat_seconds = settings.SSE_HEARTBEAT_SECONDS
    try:
        yield RETRY_MESSAGE
        positions = await read_database(unfinished_positions, run_ids)
        for run_id, seq in (drawn or {}).items():
            if run_id in positions:
                positions[run_id] = min(positions[run_id], seq)
        runs = Watch(positions)
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
