"""The DuckDB store: one file, extensions loaded from their PyPI packages, versioned migrations.

One writer: every write goes through one connection under a lock, inside a transaction. Reads
use cursors (their own connections to the same database). The async wrappers run the blocking
DuckDB calls in a thread so the event loop never waits on disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, TypeVar

import importlib.util
import sys
import time

import duckdb

from memory.errors import StoreError, StoreLockedError, StoreWriteError
from memory.store import file_swap
from memory.store.dialect import DUCKDB
from memory.store.locks import LocalLocks, ReaderGate
from memory.private_files import tighten
from memory.store.schema import MEMORY_MIGRATIONS, Migration

log = logging.getLogger(__name__)
T = TypeVar("T")

# duckdb's Python binding tries `import pandas` for every value it converts; without pandas the
# failed import is retried each time (~0.1 ms, ~400 times per recall). Caching the miss makes
# recall 10x faster. Only done when pandas is truly absent.
if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
    sys.modules["pandas"] = None  # type: ignore[assignment]
Conn = duckdb.DuckDBPyConnection


def _extension_path(package: str, name: str) -> Path:
    """The extension file inside its PyPI package, built for exactly our duckdb version."""
    import importlib

    mod = importlib.import_module(package)
    base = Path(mod.__file__).parent / "extensions"
    wanted = base / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if wanted.exists():
        return wanted
    found = sorted(str(p) for p in base.glob(f"*/{name}.duckdb_extension"))
    raise StoreError(
        f"{package} has no {name} extension for duckdb {duckdb.__version__} (found {found}); "
        f"install {package}=={duckdb.__version__}"
    )


def connect(path: Path | str, *, read_only: bool = False) -> Conn:
    """Open a DuckDB file with autoinstall/autoload off and load vss + fts from their packages."""
    config = {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreLockedError(
                f"the database {path} is in use by another memgate process (a running gateway?). "
                "A gateway that serves its API ([api] enabled, the default) is reached through it by "
                "`memgate chat` and the operator commands; otherwise stop it first, or point this command "
                "at another data folder."
            ) from None
        raise StoreError(f"cannot open {path}: {str(exc).splitlines()[0][:300]}") from None
    for package, name in (("duckdb_extension_vss", "vss"), ("duckdb_extension_fts", "fts")):
        con.execute(f"LOAD '{_extension_path(package, name)}'")
    return con


def _ddl_marker(path: Path) -> Path:
    return path.with_name(path.name + ".ddl-in-progress")


def _open_recovering(path: Path) -> Conn:
    """Open the file (after completing a swap a crash interrupted: memory/store/file_swap.py)."""
    with file_swap.guard(path, exclusive=True):
        file_swap.finish(path)
        return _open_recovering_unguarded(path)


def _open_recovering_unguarded(path: Path) -> Conn:
    """Open the file; if its WAL holds only an interrupted schema change, set that WAL aside.

    DuckDB 1.5.5 cannot replay an uncheckpointed ALTER TABLE on a table with a nextval()
    default ("Failure while replaying WAL"). Every schema change runs inside `schema_change()`,
    which checkpoints first and leaves a marker file until its own checkpoint is done, so when
    the marker exists the WAL holds nothing but that change: dropping it rolls the change back
    (it is re-applied: the migration row or reembed swap was in the same WAL) and loses nothing.
    """
    try:
        return connect(path)
    except duckdb.Error as exc:
        marker = _ddl_marker(path)
        wal = path.with_name(path.name + ".wal")
        if "replaying wal" not in str(exc).lower() or not marker.exists() or not wal.exists():
            raise StoreError(f"cannot open {path}: {str(exc).splitlines()[0][:300]}") from None
        aside = wal.with_name(f"{wal.name}.interrupted-{int(time.time())}")
        log.warning("%s: a schema change was interrupted (%s); its WAL is kept as %s and the change re-run",
                    path, marker.read_text(errors="replace").strip(), aside.name)
        wal.rename(aside)
        return connect(path)


GROUP_MAX = 64  # writes one group commit runs at most (a bound on one transaction's size)


class _Failed(Exception):
    """A function of a group raised: the group was rolled back."""


class _Write:
    """One write() call waiting for, or done by, a group commit."""

    __slots__ = ("fn", "done", "value", "error")

    def __init__(self, fn: Callable[[Conn], object]) -> None:
        self.fn = fn
        self.done = False
        self.value: object = None
        self.error: BaseException | None = None

    def finish(self, *, value: object = None, error: BaseException | None = None) -> None:
        self.value, self.error, self.done = value, error, True

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


class Store:
    """The memory database. Owns the single writer connection."""

    backend = "duckdb"

    def __init__(self, path: Path | str, dim: int, *, extra_migrations: Sequence[Migration] = ()) -> None:
        self.path = Path(path)
        self._file = str(path) != ":memory:"
        if self._file:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self._con = _open_recovering(self.path) if self._file else connect(path)
        if self._file:
            _ddl_marker(self.path).unlink(missing_ok=True)  # opened: any earlier change is settled
            # Ours to read only, even when an earlier run or a copy left them looser (a WAL DuckDB
            # creates later follows the process umask: memory.private_files.restrict_umask).
            for f in (self.path, self.path.with_name(self.path.name + ".wal")):
                if f.exists():
                    tighten(f)
        self._lock = threading.RLock()
        self._queued: list[_Write] = []   # writes waiting for the writer (group commit, `write`)
        self._queued_lock = threading.Lock()
        self._readers = ReaderGate()      # closed only while the file is swapped (compact.py)
        self._last_write = time.monotonic()
        self._exclusive = False           # set while a group, schema change or migration runs
        self._closed = False
        self.locks = LocalLocks()
        self._before_close: list[Callable[[], None]] = []
        self._migrate(tuple(MEMORY_MIGRATIONS) + tuple(extra_migrations))

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            for fn in self._before_close:
                try:
                    fn()
                except Exception:  # closing goes on: what a hook did not finish is redone at the next open
                    log.warning("a step before closing the store failed", exc_info=True)
            self._closed = True
            try:
                self._con.execute("CHECKPOINT")
            except duckdb.Error:
                log.warning("checkpoint on close failed", exc_info=True)
            self._con.close()

    def before_close(self, fn: Callable[[], None]) -> None:
        """Run `fn` when the store is closed, before its last checkpoint (a pending rewrite)."""
        self._before_close.append(fn)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def schema_change(self, what: str) -> Iterator[None]:
        """Bracket DDL so a crash cannot leave a WAL DuckDB refuses to replay (see `_open_recovering`).

        Checkpoint (the WAL is empty), leave a marker, run the change in the block (one
        `write()`), checkpoint again, remove the marker. Keep the block short: a crash inside it
        undoes the whole block on the next open.
        """
        with self._lock:
            outer, self._exclusive = self._exclusive, True  # its write() runs alone, no one else's
            self._con.execute("CHECKPOINT")
            marker = _ddl_marker(self.path) if self._file else None
            if marker is not None:
                with open(marker, "w", encoding="utf-8") as f:
                    f.write(what + "\n")
                    f.flush()
                    os.fsync(f.fileno())
            try:
                yield
            finally:
                self._exclusive = outer
            self._con.execute("CHECKPOINT")
            if marker is not None:
                marker.unlink(missing_ok=True)

    # --- access ----------------------------------------------------------------------------
    def write(self, fn: Callable[[Conn], T], *, serial: str | None = None) -> T:
        """Run `fn` on the writer connection inside one transaction (rolled back on error).

        `serial` names a group of writers PostgreSQL serialises apart from memory's; DuckDB has
        one writer connection, so every write is one group here.

        Group commit: writes that arrive while another is running wait for the writer, then the
        first of them runs all that queued meanwhile in one transaction and one COMMIT. A COMMIT
        is a WAL fsync (4 ms on a quiet disk, 10-15 ms at load 14), and a reply costs five
        writes (inbox, capture, outbox, sent, ingest), so with 30 busy chats one fsync per write
        kept the writer busy ~70% of the time and everyone queued behind it. Each write still
        returns only after the COMMIT that holds it. When one of a group's functions raises, the
        group is rolled back and each function is run again in its own transaction, in order:
        a write function must be safe to run again after its transaction was rolled back.

        Raises StoreWriteError when the disk refuses the write (full, I/O error): the database
        stays usable and the same write may succeed once there is room again.
        """
        mine = _Write(fn)
        with self._queued_lock:
            self._queued.append(mine)
        with self._lock:
            if self._exclusive:  # a schema change or migration of this thread: it runs alone
                self._take(mine)
                self._commit([mine])
            while not mine.done:
                group = self._take()
                self._exclusive = True
                try:
                    self._commit(group)
                finally:
                    self._exclusive = False
        return mine.result()

    def _take(self, only: _Write | None = None) -> list[_Write]:
        """The queued writes a group runs (or just `only`), removed from the queue."""
        with self._queued_lock:
            if only is not None:
                self._queued.remove(only)
                return [only]
            group, self._queued = self._queued[:GROUP_MAX], self._queued[GROUP_MAX:]
            return group

    def _commit(self, group: list[_Write]) -> None:
        """Run a group in one transaction; on a function's error, each alone (see `write`)."""
        if len(group) > 1:
            try:
                self._transaction(group)
                return
            except _Failed:
                pass
        for one in group:
            self._transaction([one])

    def _transaction(self, group: list[_Write]) -> None:
        """One transaction for the group, each write finished with its value or its error. A
        function's error in a group of several: rolled back, and _Failed raised (the caller runs
        each alone); a lone write keeps its own error."""
        values = []
        try:
            self._con.execute("BEGIN TRANSACTION")
            for w in group:
                try:
                    values.append(w.fn(self._con))
                except BaseException:
                    self._rollback()
                    if len(group) > 1:
                        raise _Failed from None
                    raise
            self._con.execute("COMMIT")
            self._last_write = time.monotonic()
        except _Failed:
            raise
        except (duckdb.IOException, duckdb.TransactionException) as exc:
            # A failed COMMIT ends the transaction itself; a failed statement may leave it open.
            self._rollback()
            error = StoreWriteError(f"the database {self.path} could not be written: {exc}")
            error.__cause__ = exc
            for w in group:
                w.finish(error=error)
            return
        except BaseException as exc:  # a lone write's own error, for its caller
            group[0].finish(error=exc)
            return
        for w, value in zip(group, values):
            w.finish(value=value)

    def _rollback(self) -> None:
        try:
            self._con.execute("ROLLBACK")
        except duckdb.TransactionException:
            pass  # no transaction is active any more (the failed COMMIT ended it)

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn` on a fresh cursor (its own connection; sees committed data)."""
        self._readers.enter()
        try:
            cur = self._con.cursor()
            try:
                return fn(cur)
            finally:
                cur.close()
        finally:
            self._readers.leave()

    @contextmanager
    def writes_held(self) -> Iterator[Conn]:
        """Hold off every write (reads go on); yields the writer connection."""
        with self._lock:
            yield self._con

    def swap_file(self, *, timeout: float = 60.0) -> bool:
        """Inside `writes_held()`: make the complete, synced copy (`file_swap.copy_path`) the
        database. Reads are held off (the ones running end first), the connection is closed
        without a checkpoint (the copy holds everything its WAL does), and the copy renamed in
        (file_swap.swap: crash-safe, no other process opens the file meanwhile). False, and
        nothing swapped, when reads still running after `timeout` s did not end."""
        if not self._readers.close(timeout):
            return False
        try:
            with file_swap.guard(self.path, exclusive=True):
                self._con.execute("PRAGMA disable_checkpoint_on_shutdown")
                self._con.close()
                try:
                    file_swap.swap(self.path)
                finally:
                    # The new file, or the old one with its WAL when the rename failed: the store stays usable.
                    self._con = _open_recovering_unguarded(self.path)
                tighten(self.path)
        finally:
            self._readers.open()
        return True

    def quiet_for(self) -> float:
        """Seconds since the last write committed (a rewrite waits for a quiet moment)."""
        return time.monotonic() - self._last_write

    async def awrite(self, fn: Callable[[Conn], T], *, serial: str | None = None) -> T:
        return await asyncio.to_thread(self.write, fn)

    async def aread(self, fn: Callable[[Conn], T]) -> T:
        return await asyncio.to_thread(self.read, fn)

    def meta_get(self, key: str, default: str | None = None) -> str | None:
        row = self.read(lambda c: c.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone())
        return row[0] if row else default

    @staticmethod
    def meta_set(con: Conn, key: str, value: str) -> None:
        con.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value])

    # --- migrations ------------------------------------------------------------------------
    def _migrate(self, migrations: Sequence[Migration]) -> None:
        versions = [m.version for m in migrations]
        if len(set(versions)) != len(versions):
            raise StoreError(f"duplicate migration versions: {sorted(versions)}")
        with self._lock:
            self._con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            self._con.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP DEFAULT now())"
            )
            done = {r[0] for r in self._con.execute("SELECT version FROM schema_migrations").fetchall()}
            stored_dim = self._con.execute("SELECT value FROM meta WHERE key = 'embedding_dim'").fetchone()
            if stored_dim and int(stored_dim[0]) != self.dim:
                # The stored data decides the dimension until `reembed` changes it on purpose.
                log.info("database holds %s-d embeddings; configured %s-d (run reembed to switch)", stored_dim[0], self.dim)
                self.dim = int(stored_dim[0])
            for m in sorted(migrations, key=lambda m: m.version):
                if m.version in done:
                    continue
                log.info("applying migration %s (%s)", m.version, m.name)

                def apply(con: Conn, m: Migration = m) -> None:
                    if m.sql.strip():  # empty: a step only the other backend needs
                        con.execute(DUCKDB.ddl(m, self.dim))
                    con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
                    self.meta_set(con, "embedding_dim", str(self.dim))

                with self.schema_change(f"migration {m.version} ({m.name})"):
                    self.write(apply)


def vector_literal(vec: Sequence[float]) -> str:
    """A vector as the string DuckDB casts to FLOAT[n] (a list parameter costs ~60-90 ms, this ~1 ms)."""
    return "[" + ",".join(f"{float(x):.6g}" for x in vec) + "]"


def vectors_literal(rows: Sequence[Sequence[float]]) -> str:
    """Many vectors as one string, cast in SQL to FLOAT[n][] and unnested (bulk inserts)."""
    return "[" + ",".join(vector_literal(r) for r in rows) + "]"


C = TypeVar("C")


class PerStore(Generic[C]):
    """One object per Store object, made on first use and gone with the store (the in-process
    caches of a store's data: vectors, postings)."""

    def __init__(self, make: Callable[[Store], C]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[Store, C] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, store: Store) -> C:
        with self._lock:
            got = self._made.get(store)
            if got is None:
                got = self._made[store] = self._make(store)
            return got

    def drop(self, store: Store) -> None:
        """Let go of the store's object: the next call makes a new one (as a restart would)."""
        with self._lock:
            self._made.pop(store, None)

