"""Where a run lives in Redis, shared by the worker's sink (sink.py) and the page streams (live.py): the key of its
event stream, of its stop flag and of its list of live hyperparameter changes (live_changes.py), and the client
that reaches them.

An entry of a run's stream has the id `<seq>-0` and one field, `event`: the event as JSON (seq, kind, step, time,
values). A `finished` or `failed` event is the last one.
"""

from __future__ import annotations

import redis
from django.conf import settings

STOP_FLAG_SECONDS = 8 * 24 * 3600
TERMINAL_KINDS = ("finished", "failed")


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


def request_stop(run_id: int) -> None:
    """Ask a running run to stop; its sink sees the flag within about half a second."""
    redis_client().set(stop_key(run_id), "1", ex=STOP_FLAG_SECONDS)
