"""This process among the gateway processes that share one database.

Several `memgate run` processes may serve one bot from one PostgreSQL (DuckDB: always one). They
coordinate through the store's process locks (memory/store/locks.py), which end with the
process that holds them, so a process killed at any point hands its work on with no lease to
wait out:

- every process joins under a worker number and holds the WORKER lock of that number while
  it lives; `alive()` is the set of numbers whose lock is held. A number is reused once its
  holder died, so each joining process also draws an incarnation id (written to `workers` and
  beside every conversation it owns): a conversation owned under an incarnation that is no
  longer the one living under that number belonged to a dead predecessor, whether the number
  is free or taken again (by a restart of the same process, most often);
- each conversation has an owner (`conversation_owners`): the process that answers its inbox
  and delivers its outbox. Accepting a message makes the accepting process the owner; a
  process adopts the conversations with pending work whose owner is dead (or that have none)
  on the channels it receives, and answers them as a restart would;
- a channel only one process may receive from (a Telegram bot's getUpdates, an iLink bot's
  cursor) is received by the holder of its LEADER lock; the others stand by and take over
  when it dies (`lead()` is retried by the gateway).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from memory.store.backend import MemoryStore
from memory.store.connection import Conn, Migration
from memory.store.locks import LockSpace, lock_key
from memory.store.rows import utc_naive

log = logging.getLogger(__name__)

CLUSTER_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        501,
        "workers and conversation owners",
        """
        CREATE TABLE workers (
            n BIGINT PRIMARY KEY,               -- the worker number its WORKER lock is held under
            pid BIGINT NOT NULL,
            host VARCHAR NOT NULL,
            started_at TIMESTAMP NOT NULL
        );
        CREATE TABLE conversation_owners (
            conversation_key VARCHAR PRIMARY KEY,
            worker BIGINT NOT NULL              -- workers.n of the process answering it
        );
        """,
    ),
    Migration(
        502,
        "worker incarnations",
        """
        ALTER TABLE workers ADD COLUMN incarnation VARCHAR;             -- this life of the number
        ALTER TABLE conversation_owners ADD COLUMN incarnation VARCHAR; -- the owner's life
        """,
    ),
)

# Conversations with pending work on the channels whose owner is dead or missing. (Checked, then
# upserted, in one write: DuckDB allows no subquery in an upsert's DO UPDATE WHERE.)
_ORPHANS = """
    SELECT w.conversation_key FROM (
        SELECT conversation_key FROM inbox WHERE status = 'pending' AND channel IN (SELECT unnest(?::VARCHAR[]))
        UNION
        SELECT conversation_key FROM outbox WHERE status = 'pending' AND channel IN (SELECT unnest(?::VARCHAR[]))) w
    LEFT JOIN conversation_owners o ON o.conversation_key = w.conversation_key
    LEFT JOIN workers k ON k.n = o.worker
    WHERE o.worker IS NULL OR o.worker NOT IN (SELECT unnest(?::BIGINT[]))
       OR o.incarnation IS DISTINCT FROM k.incarnation
"""
_OWN = """
    INSERT INTO conversation_owners (conversation_key, worker, incarnation) SELECT k, ?, ? FROM (SELECT unnest(?::VARCHAR[]) AS k)
    ON CONFLICT (conversation_key) DO UPDATE SET worker = excluded.worker, incarnation = excluded.incarnation
"""


class Cluster:
    """This process's worker number, who else is alive, leadership and conversation ownership."""

    def __init__(self, store: MemoryStore, *, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock
        self.worker: int | None = None
        self.incarnation = uuid.uuid4().hex  # drawn anew at each join
        # The channels this process receives now (the gateway keeps it); None: all of them (a
        # process without a gateway, e.g. a test or a CLI command).
        self.receiving: set[str] | None = None

    @property
    def shared(self) -> bool:
        """Whether other processes can share this database (PostgreSQL) at all."""
        return self.store.backend != "duckdb"

    def join(self) -> int:
        """Take a worker number (the smallest not alive) and hold its lock."""
        if self.worker is not None:
            return self.worker
        while True:
            alive = self.store.locks.held(LockSpace.WORKER)
            n = next(i for i in range(1, len(alive) + 2) if i not in alive)
            if self.store.locks.try_hold(LockSpace.WORKER, n):
                break  # another process starting at the same moment took n: try the next free one
        now = utc_naive(self.clock())
        # The lock was free: whoever lived under n before is dead, and what it owned is orphaned
        # by the new incarnation (see the module docstring).
        self.incarnation = uuid.uuid4().hex
        self.store.write(lambda c: c.execute(
            "INSERT INTO workers (n, pid, host, started_at, incarnation) VALUES (?, ?, ?, ?, ?) ON CONFLICT (n) DO UPDATE "
            "SET pid = excluded.pid, host = excluded.host, started_at = excluded.started_at, incarnation = excluded.incarnation",
            [n, os.getpid(), socket.gethostname(), now, self.incarnation]))
        self.worker = n
        return n

    def leave(self) -> None:
        if self.worker is not None:
            self.store.locks.release(LockSpace.WORKER, self.worker)
            self.worker = None

    def alive(self) -> set[int]:
        return self.store.locks.held(LockSpace.WORKER)

    def check(self) -> set[str]:
        """Ping the lock session (after it was lost, a new one re-takes every lock); join anew if
        this process's worker number went to another process meanwhile (its conversations are then
        orphans of the old incarnation, adopted like a dead process's). Returns the lock keys of
        the leaderships lost (see `leader_key`)."""
        lost = self.store.locks.verify()
        if self.worker is not None and (int(LockSpace.WORKER), self.worker) in lost:
            log.warning("worker number %s went to another process while the database was away; joining anew", self.worker)
            self.worker = None
            self.join()
        return {str(key) for space, key in lost if space == int(LockSpace.LEADER)}

    # --- receiving -----------------------------------------------------------------------------
    @staticmethod
    def leader_key(name: str) -> str:
        return str(lock_key(f"receive:{name}"))

    def lead(self, name: str) -> bool:
        """Become (or stay) the one receiver of `name`; False while another process is. Asks the
        server (a lock session lost with a restarted server is made again, and its locks re-taken
        or found taken), so a poller calls it before each poll."""
        key = lock_key(f"receive:{name}")
        return self.store.locks.holds(LockSpace.LEADER, key) or self.store.locks.try_hold(LockSpace.LEADER, key)

    def resign(self, name: str) -> None:
        self.store.locks.release(LockSpace.LEADER, lock_key(f"receive:{name}"))

    # --- ownership -----------------------------------------------------------------------------
    def adopt(self, channels: Sequence[str]) -> list[str]:
        """Make this process the owner of every conversation with pending work on `channels`
        whose owner is dead or missing; the conversation keys adopted."""
        me = self.join()
        if not channels:
            return []
        if not self.shared:  # one process: everything pending is this process's
            return self.store.read(lambda c: sorted({r[0] for r in c.execute(
                _ORPHANS, [list(channels), list(channels), []]).fetchall()}))
        alive = sorted(self.alive() | {me})

        def write(con: Conn) -> list[str]:
            keys = sorted({r[0] for r in con.execute(_ORPHANS, [list(channels), list(channels), alive]).fetchall()})
            if keys:
                con.execute(_OWN, [me, self.incarnation, keys])
            return keys

        return self.store.write(write)

    def own(self, con: Conn, conversation_key: str) -> None:
        """Inside a write: this process owns the conversation from now on (it accepted a message of it)."""
        if not self.shared:
            return
        con.execute(_OWN, [self.join(), self.incarnation, [conversation_key]])

    def own_if_free(self, con: Conn, conversation_key: str, channel: str) -> None:
        """Inside a write: own the conversation unless a live process does (a reply queued by a
        process that did not receive the conversation is delivered by its owner); left unowned
        when this process does not receive `channel` (its receiver adopts it)."""
        if not self.shared or (self.receiving is not None and channel not in self.receiving):
            return
        me = self.join()
        row = con.execute("SELECT o.worker, o.incarnation IS NOT DISTINCT FROM k.incarnation FROM conversation_owners o "
                          "LEFT JOIN workers k ON k.n = o.worker WHERE o.conversation_key = ?", [conversation_key]).fetchone()
        if row is None or not row[1] or row[0] not in self.alive() | {me}:
            con.execute(_OWN, [me, self.incarnation, [conversation_key]])

    def mine_sql(self) -> tuple[str, list]:
        """A condition on `conversation_key` (and its parameters): conversations this process owns."""
        if not self.shared:
            return "TRUE", []
        me = self.join()
        return ("conversation_key IN (SELECT conversation_key FROM conversation_owners WHERE worker = ? AND incarnation = ?)",
                [me, self.incarnation])
