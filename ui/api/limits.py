"""What one client may ask of the API: requests per minute per key (429 with ``Retry-After``), and how large a
body it may send (413, read no further than the limit).

The rate limit is a token bucket per key (or signed-in user): it holds up to the limit's worth of requests and
refills at the limit's rate, so a client may send a burst and then one request every 60/limit seconds. Buckets
live in this process: a deployment with several API processes behind a balancer gives each its share.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ui.api.errors import ApiError

IDLE_S = 600.0  # a bucket untouched this long is full again, and dropped
DRAIN_BYTES = 32 * 1024 * 1024  # read (and drop) an oversized body up to this, so its sender sees the 413


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """Token buckets by id. Thread-safe; ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()
        self._swept = clock()

    def take(self, bucket_id: str, per_minute: int) -> float | None:
        """Take one request from ``bucket_id``'s bucket: None when allowed, else the seconds until one is."""
        now = self._clock()
        rate = per_minute / 60.0
        with self._lock:
            if now - self._swept > IDLE_S:
                self._buckets = {k: b for k, b in self._buckets.items() if now - b.stamp <= IDLE_S}
                self._swept = now
            bucket = self._buckets.get(bucket_id)
            if bucket is None:
                bucket = self._buckets[bucket_id] = _Bucket(float(per_minute), now)
            bucket.tokens = min(float(per_minute), bucket.tokens + (now - bucket.stamp) * rate)
            bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            return (1.0 - bucket.tokens) / rate

    def check(self, bucket_id: str, per_minute: int, label: str) -> None:
        """Take one request, or raise the 429 that says when to retry."""
        wait = self.take(bucket_id, per_minute)
        if wait is None:
            return
        retry = max(1, math.ceil(wait))
        raise ApiError(
            429,
            f"Rate limit reached for {label}: {per_minute} requests per minute. Retry after {retry} s "
            "(an administrator can raise a key's limit: `rag keys create --rate-limit N`).",
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(retry)},
        )


async def read_body(content_length: str | None, chunks: AsyncIterator[bytes], max_bytes: int) -> bytes:
    """The request body, or a 413 when it exceeds ``max_bytes``. The server keeps no more than the limit; it
    reads the rest of a body up to ``DRAIN_BYTES`` and drops it, so the client, still sending, gets the 413
    rather than a connection reset; a larger body (by its Content-Length, or as it arrives) is cut off."""
    too_large = ApiError(
        413,
        f"The request body is larger than {max_bytes:,} bytes, the most this API reads "
        "(RAG_API_MAX_BODY_BYTES). Send the question and the recent conversation only.",
        code="request_too_large",
    )
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise ApiError(
                400, "The Content-Length header is not a number.", code="invalid_request"
            ) from None
        if declared > DRAIN_BYTES:
            raise too_large
    body = bytearray()
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size <= max_bytes:
            body.extend(chunk)
        elif size > DRAIN_BYTES:
            raise too_large
    if size > max_bytes:
        raise too_large
    return bytes(body)
