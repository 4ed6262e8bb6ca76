"""The pushes whose reply can still ride back passively: one `Callback` per push (its retries
share it), found by its dedup key and, per user, in arrival order until it is answered.

A reply is only a transport to the same person, so any callback of that user still waiting may
carry it (the one it answers first); a push is forgotten DEDUP_TTL_S after it came, long after
WeChat stopped retrying it. Pure bookkeeping on the event loop: no I/O.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["DEDUP_TTL_S", "Callback", "PendingCallbacks"]

DEDUP_TTL_S = 60.0  # WeChat's retries come within ~15 s; keep the key well past that


@dataclass(eq=False)
class Callback:
    """One push (and its retries) while a reply to it can still be matched."""

    key: str
    openid: str
    account: str  # the account's original id: FromUserName of a passive reply
    created: float  # monotonic
    first_part: asyncio.Future[str]
    listeners: int = 0  # callback handlers (first delivery or retries) waiting to answer passively
    answered: bool = False  # a reply was matched to it (passively or through the API)
    handing_over: bool = False  # inside inbound(): a send() from there must not wait for the response
    responders: int = 0  # callback handlers (first delivery and retries) that have not answered yet
    written: bool = False  # a passive reply reached WeChat
    rerouted: bool = False  # the first part went through the API: retries answer "success"
    responded: asyncio.Event = field(default_factory=asyncio.Event)  # the first part is on its way


class PendingCallbacks:
    """Callbacks by dedup key, and each user's unanswered ones, oldest first."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._by_key: dict[str, Callback] = {}
        self._open: dict[str, deque[Callback]] = {}  # openid -> callbacks not yet answered, oldest first

    def get(self, key: str) -> Callback | None:
        """The callback of an earlier delivery of this push (a retry), if still remembered."""
        return self._by_key.get(key)

    def add(self, callback: Callback) -> None:
        """A new push: remembered for its retries and open for the user's next reply."""
        self._by_key[callback.key] = callback
        self._open.setdefault(callback.openid, deque()).append(callback)

    def forget(self, callback: Callback) -> None:
        """Drop a push that was not recorded (WeChat posts it again, as a new push) and close it."""
        self._by_key.pop(callback.key, None)
        self.close(callback)

    def claim(self, openid: str, reply_to: str | None) -> Callback | None:
        """The callback whose HTTP response can carry this reply, or None.

        Any callback of this user still waiting will do (a passive reply is only a transport to
        the same person, so order and content are unchanged); the one named by `reply_to` first.
        A named callback nobody waits on any more is marked answered, so its retries do not wait.
        """
        self.purge()
        queue = list(self._open.get(openid, ()))
        waiting = [cb for cb in queue if cb.listeners > 0 and not cb.first_part.done()]
        named = next((cb for cb in queue if reply_to is not None and cb.key == reply_to), None)
        chosen = named if named in waiting else (waiting[0] if waiting else None)
        for callback in (named, chosen):
            if callback is not None:
                self.close(callback)
        return chosen

    def purge(self) -> None:
        """Forget pushes older than DEDUP_TTL_S: WeChat has stopped retrying them long since."""
        cutoff = self._monotonic() - DEDUP_TTL_S
        stale = [key for key, cb in self._by_key.items() if cb.created < cutoff and cb.listeners == 0]
        for key in stale:
            self.close(self._by_key.pop(key))

    def close(self, callback: Callback) -> None:
        """Take a callback off its user's list of unanswered ones."""
        callback.answered = True
        queue = self._open.get(callback.openid)
        if queue is not None and callback in queue:
            queue.remove(callback)
            if not queue:
                del self._open[callback.openid]

    def clear(self) -> None:
        """Forget every push (the channel stopped)."""
        self._by_key.clear()
        self._open.clear()
