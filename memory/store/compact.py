"""Rewriting the DuckDB file so that forgotten text leaves the disk, not just the tables.

A forget or an erase empties rows, but DuckDB keeps what they held: an UPDATE or DELETE leaves
the old row versions in blocks that a checkpoint marks free without overwriting them, and
`VACUUM` does not reclaim them. Anyone with a copy of the file (a backup, a migrated disk) could
read a forgotten marker word back with `strings`. DuckDB's own answer is to copy the database
into a fresh file (`COPY FROM DATABASE`): only live rows are written. Here that copy is swapped
in for the file:

1. the store is paused (no write, no read; memory/store/connection.py `paused`) and checkpointed,
   so the WAL is empty and the file holds every committed row;
2. every table, sequence and index is copied into `<db>.rewrite` beside it, the pending mark is
   dropped from the copy, and the copy is checkpointed and fsynced;
3. the writer connection is closed, the copy renamed over the file (the folder fsynced) and
   opened (`Store.swap_file`, under the folder lock no other memgate process opens it past).

A crash at any point loses nothing: before the rename the old file is whole and still carries
the pending mark (`rewrite.pending` in `meta`, written in the forget's own transaction), so the
next open removes the half-made copy and rewrites again; after it the new file is whole. A
forget asks for the rewrite; the running gateway does it in the background a little later
(`BackgroundRewrite`, several forgets share one), and a store being closed does what is pending
first. An erase does it at once. PostgreSQL has no such step: the rows are gone from the tables
and VACUUM is the server's (docs/scale-out.md says what it does and does not promise on disk).

The vector files of the spaces named in the mark are rewritten with live rows only (or removed,
to be rebuilt from the table), so a forgotten memory's vector does not stay behind either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory.store.dialect import dialect_of

if TYPE_CHECKING:
    from memory.store.connection import Store

log = logging.getLogger(__name__)

PENDING_KEY = "rewrite.pending"   # meta: JSON list of the spaces whose text was forgotten
COPY_NAME = "memgate_rewrite"     # the fresh file's name while it is attached
Stage = Callable[[str], None]     # told "copying", "copied", "swapping", "swapped" (crash tests, logs)


@dataclass(frozen=True, slots=True)
class RewriteResult:
    bytes_before: int             # the file and its WAL before
    bytes_after: int
    seconds: float


def request_rewrite(con: Any, spaces: Sequence[str]) -> None:
    """Ask for a rewrite of the file (inside the transaction that forgot something in `spaces`)."""
    if dialect_of(con).postgres:
        return
    row = con.execute("SELECT value FROM meta WHERE key = ?", [PENDING_KEY]).fetchone()
    have = set(json.loads(row[0])) if row else set()
    con.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [PENDING_KEY, json.dumps(sorted(have | set(spaces)))])


def pending_spaces(store: object) -> list[str] | None:
    """The spaces a pending rewrite covers ([] for the file alone), or None when none is pending."""
    if getattr(store, "backend", None) != "duckdb":
        return None
    value = store.meta_get(PENDING_KEY)
    return None if value is None else list(json.loads(value))


def _copy_path(store: Store) -> Path:
    return store.path.with_name(store.path.name + ".rewrite")


def _wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, _wal(path)) if p.exists())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rewrite(store: Store, *, stage: Stage | None = None) -> RewriteResult | None:
    """Rewrite the file with live rows only and swap it in (see the module docstring). None for
    a store without a file, or when reads that would not end kept it from pausing (the mark
    stays: it is tried again)."""
    if getattr(store, "backend", None) != "duckdb" or not getattr(store, "_file", False):
        return None
    tell = stage or (lambda _s: None)
    started, before = time.perf_counter(), _size(store.path)
    spaces = pending_spaces(store) or []
    _refile_vectors(store, spaces)
    fresh = _copy_path(store)
    with store.paused() as con:
        if con is None:
            log.warning("the database rewrite waited too long for reads to end: it is tried again later")
            return None
        con.execute("CHECKPOINT")
        for leftover in (fresh, _wal(fresh)):
            leftover.unlink(missing_ok=True)
        source = con.execute("SELECT current_database()").fetchone()[0]
        tell("copying")
        con.execute(f"ATTACH '{_quoted(fresh)}' AS {COPY_NAME}")
        try:
            con.execute(f'COPY FROM DATABASE "{source}" TO {COPY_NAME}')
            con.execute(f"DELETE FROM {COPY_NAME}.meta WHERE key = ?", [PENDING_KEY])
            con.execute(f"CHECKPOINT {COPY_NAME}")
        finally:
            con.execute(f"DETACH {COPY_NAME}")
        if _wal(fresh).exists():  # a checkpointed, detached copy has none; never swap in half a database
            fresh.unlink(missing_ok=True)
            _wal(fresh).unlink(missing_ok=True)
            raise OSError(f"the rewritten copy {fresh} kept a WAL: the rewrite was not swapped in")
        os.chmod(fresh, 0o600)
        _fsync(fresh)
        tell("copied")
        tell("swapping")
        store.swap_file(fresh)
        tell("swapped")
    result = RewriteResult(before, _size(store.path), time.perf_counter() - started)
    log.info("database rewritten with live rows only: %d -> %d bytes in %.2f s",
             result.bytes_before, result.bytes_after, result.seconds)
    return result


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def _refile_vectors(store: Store, spaces: Sequence[str]) -> None:
    """The vector files of `spaces` with live rows only (or gone, rebuilt from the table)."""
    if not spaces:
        return
    from memory.store.vectors import cache_for

    cache_for(store).refile(spaces)


def attach(store: object) -> None:
    """Look after a DuckDB file store's rewrites (the engine does, for the store it is given):
    finish one a crash left undone, now, and do a pending one when the store is closed."""
    if getattr(store, "backend", None) != "duckdb" or not getattr(store, "_file", False):
        return
    finish_interrupted(store)
    store.before_close(lambda: finish_pending(store))


def finish_interrupted(store: Store) -> None:
    """At open: remove a copy a crash left half-made, and do the rewrite it was for."""
    fresh = _copy_path(store)
    for leftover in (fresh, _wal(fresh)):
        if leftover.exists():
            log.warning("removing %s, left by an interrupted rewrite", leftover.name)
            leftover.unlink(missing_ok=True)
    finish_pending(store)


def finish_pending(store: Store) -> RewriteResult | None:
    """Do a pending rewrite now (a store being opened or closed)."""
    if pending_spaces(store) is None:
        return None
    return rewrite(store)


class BackgroundRewrite:
    """Runs a pending rewrite `delay` seconds after the last request, off the event loop, so a
    burst of forgets costs one rewrite and no reply waits for it."""

    def __init__(self, store: object, *, delay: float = 5.0) -> None:
        self.store = store
        self.delay = delay
        self._task: asyncio.Task | None = None

    def soon(self) -> None:
        """Schedule the rewrite (from the event loop; without one, the store's close does it)."""
        if getattr(self.store, "backend", None) != "duckdb":
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = loop.create_task(self._run(), name="database-rewrite")

    async def _run(self) -> None:
        await asyncio.sleep(self.delay)
        try:
            await asyncio.to_thread(finish_pending, self.store)
        except Exception:  # the mark stays: the next request, open or close does it
            log.warning("the database rewrite failed; it is tried again later", exc_info=True)

    async def idle(self) -> None:
        """Wait for a scheduled rewrite to finish (tests, shutdown)."""
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def stop(self) -> None:
        """Cancel a rewrite still waiting for its delay (the store's close does it instead)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
