"""Named locks that live exactly as long as the process holding them: what several gateway
processes on one database coordinate with (one poller per bot, a job run once, who is alive).

On PostgreSQL they are session-level advisory locks on one connection kept for the purpose:
the server drops them the moment that connection ends, so a process killed with SIGKILL (its
socket closed by the kernel) gives its locks up at once, with no lease to expire and no clock to
trust. `held(space)` reads `pg_locks`, which is how a process tells which others are alive.
On DuckDB one process owns the file, so the locks are that process's own bookkeeping.

A lock is (space, key): `space` groups locks of one kind (LockSpace), `key` is a number in it
(a worker's number, or `lock_key(name)` for a named lock).
"""

from __future__ import annotations

import threading
import zlib
from enum import IntEnum


class LockSpace(IntEnum):
    WORKER = 1   # held by each running process under its worker number: "alive"
    LEADER = 2   # one holder per name: the process that polls a bot's updates
    JOB = 3      # one holder per scheduler job while it runs
    INGEST = 4   # one holder per space while a batch of its turns is ingested


def lock_key(name: str) -> int:
    """A stable non-negative 31-bit number for a name (advisory lock keys are int4)."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


class LocalLocks:
    """The DuckDB store's locks: only this process can hold any (it owns the file)."""

    def __init__(self) -> None:
        self._held: set[tuple[int, int]] = set()
        self._mutex = threading.Lock()

    def try_hold(self, space: int, key: int) -> bool:
        with self._mutex:
            self._held.add((int(space), key))
            return True

    def release(self, space: int, key: int) -> None:
        with self._mutex:
            self._held.discard((int(space), key))

    def holds(self, space: int, key: int) -> bool:
        with self._mutex:
            return (int(space), key) in self._held

    def verify(self) -> set[tuple[int, int]]:
        """Locks lost since the last call: none (they live in this process's memory)."""
        return set()

    def held(self, space: int) -> set[int]:
        with self._mutex:
            return {k for s, k in self._held if s == int(space)}


class ReaderGate:
    """Readers pass freely until `closed()` holds the gate: then new readers wait, and the
    holder waits for the readers inside to leave (the DuckDB file is being swapped for its
    rewritten copy, memory/store/compact.py). A thread already reading passes again (a read
    inside a read would otherwise wait for a holder that waits for it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._closed = False
        self._mine = threading.local()

    def enter(self) -> None:
        depth = getattr(self._mine, "depth", 0)
        with self._cond:
            while self._closed and depth == 0:
                self._cond.wait()
            self._readers += 1
        self._mine.depth = depth + 1

    def leave(self) -> None:
        self._mine.depth -= 1
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def close(self, timeout: float) -> bool:
        """Stop new readers and wait up to `timeout` s for the others to leave; False (and the
        gate open again) when they did not."""
        with self._cond:
            self._closed = True
            if self._cond.wait_for(lambda: self._readers == 0, timeout):
                return True
            self._closed = False
            self._cond.notify_all()
            return False

    def open(self) -> None:
        with self._cond:
            self._closed = False
            self._cond.notify_all()
