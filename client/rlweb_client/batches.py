"""How many points fit one request: the server bounds a points request's body (`points_max_bytes` in its answers,
RLWEB_LOGGED_POINTS_MAX_MB on the server), so a batch is sized in bytes as well as in points, and never exceeds it
whatever the number of metrics a point carries."""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

DEFAULT_MAX_BYTES = 2_621_440  # Django's own bound (2.5 MB), for a server that does not say its own
ENVELOPE = len(json.dumps({"points": []}))
SEPARATOR = len(", ")


def max_bytes_of(answer: Any) -> int:
    """The bound a server's answer gives, else Django's default."""
    value = answer.get("points_max_bytes") if isinstance(answer, dict) else None
    return value if isinstance(value, int) and value > ENVELOPE else DEFAULT_MAX_BYTES


def count_fitting(points: Sequence[dict], max_bytes: Optional[int]) -> int:
    """How many points at the front of `points` fit one request body of `max_bytes` as the transport encodes it
    (json.dumps); at least one, so a point too large on its own is sent, and refused, alone."""
    size = ENVELOPE - SEPARATOR
    for count, point in enumerate(points):
        size += len(json.dumps(point)) + SEPARATOR
        if count and size > (max_bytes or DEFAULT_MAX_BYTES):
            return count
    return len(points)
