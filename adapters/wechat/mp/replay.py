"""Refuse a replayed Official Account callback: remember every signed (timestamp, nonce) in the window.

A callback's signature covers token, timestamp and nonce (and, in safe mode, the ciphertext),
never who may send it again: anyone who saw one callback URL could post it again. A push is
accepted only when its timestamp is within `window` seconds of our clock AND its (timestamp,
nonce) pair has not been accepted before; a pair is forgotten once its timestamp has left the
window, since the freshness check refuses it from then on anyway. So memory holds at most the
pushes of one window; `capacity` bounds it even under a flood of genuine pushes (the oldest
pairs go first, and those are the nearest to expiring).

Pure state, no I/O: the caller passes `now` (wall seconds).
"""

from __future__ import annotations

import heapq
from typing import Literal

__all__ = ["ReplayGuard", "Verdict"]

Verdict = Literal["fresh", "stale", "replayed"]


class ReplayGuard:
    """The (timestamp, nonce) pairs accepted within the window."""

    def __init__(self, window: float, capacity: int = 65_536) -> None:
        if window <= 0 or capacity <= 0:
            raise ValueError("window and capacity must be positive")
        self.window = window
        self.capacity = capacity
        self._seen: set[tuple[int, str]] = set()
        self._expiry: list[tuple[float, tuple[int, str]]] = []  # heap of (forget at, pair)

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, timestamp: str, nonce: str, now: float) -> Verdict:
        """"fresh" (and remembered), "stale" (outside the window or not a number) or "replayed".

        Call it only for a push whose signature checked: an unsigned pair must not take room.
        """
        self._forget(now)
        try:
            ts = int(timestamp)
        except ValueError:
            return "stale"
        if abs(now - ts) > self.window:
            return "stale"
        pair = (ts, nonce)
        if pair in self._seen:
            return "replayed"
        if len(self._seen) >= self.capacity:
            _, oldest = heapq.heappop(self._expiry)
            self._seen.discard(oldest)
        self._seen.add(pair)
        heapq.heappush(self._expiry, (ts + self.window, pair))
        return "fresh"

    def _forget(self, now: float) -> None:
        """Drop pairs whose timestamp has left the window (they are refused as stale from now on)."""
        while self._expiry and self._expiry[0][0] < now:
            _, pair = heapq.heappop(self._expiry)
            self._seen.discard(pair)
