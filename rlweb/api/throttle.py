"""The API's rate limit: a fixed window of a minute per token (per user for a browser session), counted in Redis,
settings.API_RATE_PER_MINUTE requests each; past it, 429 with Retry-After (the seconds left in the window).
Redis down: requests are let through, as the API's other work (launching, changes) says itself what failed."""

from __future__ import annotations

import threading
import time

import redis
from django.conf import settings
from ninja.throttling import BaseThrottle

from rlweb.experiments.redis_keys import redis_client

WINDOW_SECONDS = 60


class TokenRateThrottle(BaseThrottle):
    def __init__(self):
        self.local = threading.local()

    def allow_request(self, request) -> bool:
        token = getattr(request, "api_token", None)
        who = f"token:{token.pk}" if token is not None else f"user:{request.auth.pk}"
        window = int(time.time() // WINDOW_SECONDS)
        self.local.wait = (window + 1) * WINDOW_SECONDS - time.time()
        key = f"rlweb:api:rate:{who}:{window}"
        try:
            pipeline = redis_client().pipeline()
            pipeline.incr(key)
            pipeline.expire(key, WINDOW_SECONDS + 5)
            count, _ = pipeline.execute()
        except redis.RedisError:
            return True
        return count <= settings.API_RATE_PER_MINUTE

    def wait(self) -> float:
        return max(1.0, getattr(self.local, "wait", WINDOW_SECONDS))
