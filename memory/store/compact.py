"""Rewriting the DuckDB file so that forgotten text leaves the disk, not just the tables.

A forget or an erase empties rows, but DuckDB keeps what they held: an UPDATE or DELETE leaves
the old row versions in blocks that a checkpoint marks free without overwriting them, and
`VACUUM` does not reclaim them. Anyone with a copy of the file (a backup, a migrated disk) could
read a forgotten marker word back with `strings`. DuckDB's own answer is to copy the database
into a fresh file (`COPY FROM DATABASE`): only live rows are written. Here that copy is swapped
in for the file:

1. writes are held off (reads go on), so the copy holds every committed row, the WAL's too;
2. every table, sequence and index is copied into `<db>.rewrite` beside it, the pending mark is
   dropped from the copy, and the copy is checkpointed and fsynced;
3. reads are held off too, the connection closed without a checkpoint, the copy renamed in and
   opened (`Store.swap_file`; memory/store/file_swap.py: the old WAL set aside, a marker that
   lets the next open complete a swap a crash interrupted, the folder lock no other memgate
   process opens the file past).

A crash at any point loses nothing: before the copy is complete the old file and its WAL are
whole and still carry the pending mark (`rewrite.pending` in `meta`, written in the forget's own
transaction), so the next open removes the half-made copy and the engine rewrites again; once
it is complete the next open puts it in place. A
forget asks for the rewrite; the running gateway does it in the background a little later
(`BackgroundRewrite`, several forgets share one), and a store being closed does what is pending
first. An erase does it at once. The copy holds writes back for as long as it takes
(bench/erase_cost.py measures it), so the background run waits for a quiet moment. PostgreSQL
has no such step: the rows are gone from the tables and VACUUM is the server's (docs/scale-out.md
says what it does and does not promise on disk).

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
from memory.store.file_swap import copy_path, wal_of

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


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, wal_of(path)) if p.exists())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rewrite(store: Store, *, stage: Stage | None = None) -> RewriteResult | None:
    """Rewrite the file with live rows only and swap it in (see the module docstring). None for
    a store without a file, or when reads that would not end kept it from swapping (the mark
    stays: it is tried again)."""
    if getattr(store, "backend", None) != "duckdb" or not getattr(store, "_file", False):
        return None
    tell = stage or (lambda _s: None)
    started, before = time.perf_counter(), _size(store.path)
    spaces = pending_spaces(store) or []
    _refile_vectors(store, spaces)
    fresh = copy_path(store.path)
    with store.writes_held() as con:   # reads go on while the copy is made; writes wait
        for leftover in (fresh, wal_of(fresh)):
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
        if wal_of(fresh).exists():  # a checkpointed, detached copy has none; never swap in half a database
            fresh.unlink(missing_ok=True)
            wal_of(fresh).unlink(missing_ok=True)
            raise OSError(f"the rewritten copy {fresh} kept a WAL: the rewrite was not swapped in")
        os.chmod(fresh, 0o600)
        _fsync(fresh)
        tell("copied")
        tell("swapping")
        if not store.swap_file():
            fresh.unlink(missing_ok=True)
            log.warning("the database rewrite waited too long for reads to end: it is tried again later")
            return None
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
    do one a crash left undone, now, and a pending one when the store is closed."""
    if getattr(store, "backend", None) != "duckdb" or not getattr(store, "_file", False):
        return
    finish_pending(store)
    store.before_close(lambda: finish_pending(store))


def finish_pending(store: Store) -> RewriteResult | None:
    """Do a pending rewrite now (a store being opened or closed)."""
    if pending_spaces(store) is None:
        return None
    return rewrite(store)


class BackgroundRewrite:
    """Runs a pending rewrite `delay` seconds after the last request, once the store has been
    quiet (no write) for `quiet` seconds or `patience` seconds went by, off the event loop: a
    burst of forgets costs one rewrite, and the copy, which holds writes back, falls between turns."""

    def __init__(self, store: object, *, delay: float = 5.0, quiet: float = 5.0, patience: float = 600.0) -> None:
        self.store = store
        self.delay, self.quiet, self.patience = delay, quiet, patience
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
        waited = 0.0
        while waited < self.patience and self.store.quiet_for() < self.quiet:
            await asyncio.sleep(1.0)
            waited += 1.0
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
