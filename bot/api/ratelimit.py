"""Per-key token buckets: `burst` requests at once, refilled at `per_minute` / 60 per second.

Pure arithmetic over an injected monotonic clock, so tests move time instead of sleeping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """take(key) -> 0.0 when allowed, else the seconds until one token is back (Retry-After)."""

    def __init__(self, per_minute: float, burst: int, *, clock: Callable[[], float], max_buckets: int = 100_000) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self.max_buckets = max_buckets
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str) -> float:
        """tokens = min(burst, tokens + (now - at) * rate); allowed when tokens >= 1."""
        now = self.clock()
        b = self._buckets.get(key)
        if b is None:
            if len(self._buckets) >= self.max_buckets:
                self._forget_full(now)
            b = self._buckets[key] = _Bucket(self.burst, now)
        b.tokens = min(self.burst, b.tokens + (now - b.at) * self.rate)
        b.at = now
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        return (1.0 - b.tokens) / self.rate if self.rate > 0 else math.inf

    def _forget_full(self, now: float) -> None:
        """Bound memory whatever the number of callers (a login limiter sees every guessed key): a
        bucket that has refilled is the same as none; if every bucket is still draining, the
        oldest half goes (their callers start again with a full burst, never with less)."""
        for k in [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * self.rate >= self.burst]:
            del self._buckets[k]
        if len(self._buckets) >= self.max_buckets:
            for k in sorted(self._buckets, key=lambda k: self._buckets[k].at)[: len(self._buckets) // 2]:
                del self._buckets[k]


def retry_after_header(seconds: float) -> str:
    """Retry-After takes whole seconds; round up so a client that obeys it is let in."""
    return str(max(1, math.ceil(seconds))) if math.isfinite(seconds) else "3600"


class StreamSlots:
    """How many event streams each key holds open (`[api] streams_per_key`), and a way to end
    them all when the key is revoked: one write key held 150 streams, each an open file (issue 31)."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._open: dict[str, set[Callable[[], None]]] = {}

    def take(self, key_id: str, close: Callable[[], None]) -> bool:
        """Hold a slot for a stream that `close` ends; False when the key holds all of its own."""
        held = self._open.setdefault(key_id, set())
        if len(held) >= self.per_key:
            return False
        held.add(close)
        return True

    def give_back(self, key_id: str, close: Callable[[], None]) -> None:
        held = self._open.get(key_id)
        if held is not None:
            held.discard(close)
            if not held:
                del self._open[key_id]

    def revoked(self, key_id: str) -> int:
        """End every stream of a key that was just revoked; how many there were."""
        held = self._open.pop(key_id, set())
        for close in held:
            close()
        return len(held)

    def held(self, key_id: str) -> int:
        return len(self._open.get(key_id, ()))
