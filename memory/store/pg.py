"""The PostgreSQL store: psycopg 3 with a connection pool, pgvector for embeddings, the same
versioned migrations as DuckDB.

Statements are written once, in SQL both backends take, with DuckDB's `?` / `$name` markers;
`PgConn` turns the markers into psycopg's (memory/store/placeholders.py) and offers the few
DuckDB connection methods memgate uses (`execute`, `executemany`, `fetchone`, `fetchall`,
`fetchnumpy`). What differs (vector search, DDL types, casts) comes from `memory/store/dialect.py`.

Writes: one transaction per `write(fn)`, serialised across processes like DuckDB's single
writer (an advisory lock; see `PgStore.write`).
Nothing here remembers the database's state between calls: the caches' watermarks and
generations are read from `meta` on every search, so another process's writes are seen.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg.adapt import Loader
from psycopg.types.array import ListDumper
from psycopg_pool import ConnectionPool

from memory.errors import StoreError, StoreUnavailableError, StoreWriteError
from memory.store.dialect import POSTGRES, Dialect
from memory.store.locks import lock_key
from memory.store.placeholders import to_pyformat
from memory.store.schema import MEMORY_MIGRATIONS, Migration

log = logging.getLogger(__name__)
T = TypeVar("T")
TEXT_ARRAY_OID = 1009
POOL_MAX = 8
MEMORY_WRITES = "memgate.write"
WRITE_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext(%s))"


class _ListDumper(ListDumper):
    """An empty or all-NULL list as text[] (psycopg leaves it untyped, and `unnest(unknown)` is
    ambiguous); DuckDB infers these from the statement."""

    def get_key(self, obj: list[Any], format: Any) -> Any:
        if self._find_list_element(obj, format) is None:
            return (self.cls, None)  # a key of its own, so `upgrade` is asked
        return super().get_key(obj, format)

    def upgrade(self, obj: list[Any], format: Any) -> ListDumper:
        d = super().upgrade(obj, format)
        if not d.oid:  # no element, or str elements (psycopg sends str untyped)
            d = type(self)(self.cls, self._tx) if d is self else d
            d.oid = TEXT_ARRAY_OID
        return d


class _VectorLoader(Loader):
    """pgvector's text form `[1,2,3]` as a float32 numpy array (what DuckDB's fetchnumpy gives)."""

    def load(self, data: Any) -> np.ndarray:
        return np.array(bytes(data)[1:-1].split(b","), dtype=np.float32)


def _configure(conn: psycopg.Connection) -> None:
    conn.adapters.register_dumper(list, _ListDumper)
    info = conn.execute("SELECT oid FROM pg_type WHERE typname = 'vector'").fetchone()
    if info:
        conn.adapters.register_loader(info[0], _VectorLoader)
    conn.commit()


class PgConn:
    """A psycopg connection with the DuckDB connection methods memgate calls."""

    dialect: Dialect = POSTGRES

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self._cur = conn.cursor()

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> PgConn:
        # Without parameters psycopg sends the text as it is (several statements allowed).
        text = to_pyformat(sql)[0] if params is not None else sql
        self._cur.execute(text, params, prepare=False)
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> PgConn:
        text, _ = to_pyformat(sql)
        self._cur.executemany(text, rows)
        return self

    def copy_rows(self, table: str, columns: str, rows: Sequence[Sequence[Any]]) -> None:
        """Bulk insert through COPY (PostgreSQL's fast path; DuckDB's is INSERT ... SELECT unnest)."""
        with self._cur.copy(f"COPY {table} ({columns}) FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)

    def fetchone(self) -> tuple | None:
        return self._cur.fetchone()

    def fetchall(self) -> list[tuple]:
        return self._cur.fetchall()

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        names = [d.name for d in self._cur.description or ()]
        rows = self._cur.fetchall()
        cols = list(zip(*rows)) if rows else [() for _ in names]
        return {n: _column(c) for n, c in zip(names, cols)}

    def cursor(self) -> PgConn:
        return self

    def close(self) -> None:
        self._cur.close()


def _column(values: tuple) -> np.ndarray:
    if not values or any(v is None or isinstance(v, (np.ndarray, str, list)) for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = list(values)
        return out
    return np.asarray(values)


def _first_line(exc: BaseException) -> str:
    """The reason in one line (libpq puts it after its "connection to server ... failed" lines)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    return (lines[-1] if lines[0].startswith("connection") else lines[0])[:300]


# SQLSTATE classes that blame the statement itself (its syntax, its data, a constraint): the same
# write fails again whatever the server's state, so it is a bug to report, not a write to retry.
# Everything else (the connection, a read-only or shutting-down server, a full disk, an outcome
# never confirmed) means only that the write did not happen: StoreWriteError, retried later.
_STATEMENT_CLASSES = ("22", "23", "42")
_NOT_THE_STATEMENT = ("42501",)  # insufficient_privilege: the server refuses writes to us


def _statement_fault(exc: psycopg.Error) -> bool:
    state = exc.sqlstate or ""
    return state[:2] in _STATEMENT_CLASSES and state not in _NOT_THE_STATEMENT


class PgLocks:
    """Session-level advisory locks on a connection of their own (see memory/store/locks.py).

    Lock spaces are mixed with the database and schema, so stores of different schemas on one
    server (tests, or two bots) never see each other's locks.

    The locks live as long as that session, which may end while this process lives (the server
    restarted, the connection was cut). Whenever the session is found gone (any use of it fails,
    or `verify()` pings it), a new one re-takes every lock this process held before anything else
    is done with it; a lock another process took in the meantime is lost, and `take_lost()`
    reports it, so its holder stops the work the lock guarded (polling a bot, being a worker
    number) instead of carrying on beside the new holder.
    """

    def __init__(self, conninfo: str, kwargs: dict[str, Any]) -> None:
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._conn: psycopg.Connection | None = None
        self._mine: set[tuple[int, int]] = set()
        self._lost: set[tuple[int, int]] = set()
        self._mutex = threading.Lock()
        self._base = 0

    def _connection(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10, **self._kwargs)
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"the PostgreSQL lock session could not be made: {_first_line(exc)}") from exc
        where = conn.execute("SELECT current_database() || '/' || current_schema()").fetchone()[0]
        self._base = lock_key(where)
        self._conn = conn
        # A new session holds nothing: take back what the old one held (kept in _mine while the
        # server could not be reached), before any caller relies on holding it.
        held, self._mine = self._mine, set()
        for space, key in sorted(held):
            if conn.execute("SELECT pg_try_advisory_lock(%s, %s)", [self._space(space), key]).fetchone()[0]:
                self._mine.add((space, key))
            else:
                self._lost.add((space, key))
        if held:
            log.warning("the lock session was lost and made again: %d lock(s) taken back, %d held elsewhere now",
                        len(self._mine), len(held) - len(self._mine))
        return conn

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement on the lock session, making the session again once if it was gone."""
        conn = self._connection()
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError as exc:
            if not conn.closed:
                raise StoreUnavailableError(f"the PostgreSQL lock session failed: {_first_line(exc)}") from exc
            log.warning("the lock session ended (server restarted or connection cut); making it again")
            try:
                return self._connection().execute(sql, params).fetchall()
            except psycopg.OperationalError as exc:
                raise StoreUnavailableError(f"the PostgreSQL lock session failed: {_first_line(exc)}") from exc

    def _space(self, space: int) -> int:
        return (self._base ^ (int(space) * 0x9E3779B1)) & 0x7FFFFFFF

    def try_hold(self, space: int, key: int) -> bool:
        with self._mutex:
            if (int(space), key) in self._mine and self._conn is not None and not self._conn.closed:
                return True
            self._connection()  # a session made again re-takes what was held (maybe this one)
            if (int(space), key) in self._mine:
                return True
            got = self._execute("SELECT pg_try_advisory_lock(%s, %s)", [self._space(space), key])[0][0]
            if got:
                self._mine.add((int(space), key))
                self._lost.discard((int(space), key))
            return bool(got)

    def holds(self, space: int, key: int) -> bool:
        """Whether this process still holds the lock, checked against the server (a ping that
        notices a lost session, which re-takes what it can)."""
        with self._mutex:
            self._execute("SELECT 1")
            return (int(space), key) in self._mine

    def verify(self) -> set[tuple[int, int]]:
        """Ping the session (making it again, re-taking the locks, if it was gone); the locks lost
        since the last call, which are then forgotten."""
        with self._mutex:
            self._execute("SELECT 1")
            lost, self._lost = self._lost, set()
            return lost

    def release(self, space: int, key: int) -> None:
        with self._mutex:
            if (int(space), key) in self._mine and self._conn is not None and not self._conn.closed:
                try:
                    self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", [self._space(space), key])
                except psycopg.OperationalError:
                    pass  # the session is gone, and the lock with it
            self._mine.discard((int(space), key))

    def held(self, space: int) -> set[int]:
        """Keys of `space` held by any live session (this process's included)."""
        with self._mutex:
            self._connection()
            rows = self._execute(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted "
                "AND classid = %s::bigint::oid AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [self._space(space)])
            return {int(r[0]) for r in rows}

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
            self._mine.clear()


class PgStore:
    """The memory database on PostgreSQL (see the module docstring)."""

    backend = "postgresql"

    def __init__(self, conninfo: str, dim: int, *, extra_migrations: Sequence[Migration] = (),
                 password: str | None = None, pool_max: int = POOL_MAX) -> None:
        self.dim = dim
        self.conninfo = conninfo
        kwargs: dict[str, Any] = {"password": password} if password else {}
        # One plain connection first: a wrong password or host is one line now, where the pool
        # would retry in the background until its timeout.
        try:
            psycopg.connect(conninfo, connect_timeout=10, **kwargs).close()
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the PostgreSQL store {conninfo}: {_first_line(exc)}") from None
        # Checked when taken from the pool: after a server restart every pooled connection is dead,
        # and each would otherwise fail one caller before the pool noticed.
        self._pool = ConnectionPool(conninfo, min_size=1, max_size=pool_max, kwargs=kwargs, configure=_configure,
                                    check=ConnectionPool.check_connection, open=False, name="memgate")
        try:
            self._pool.open(wait=True, timeout=30)
        except Exception as exc:  # noqa: BLE001 - any failure to connect is one line
            self._pool.close()
            raise StoreError(f"cannot connect to the PostgreSQL store {conninfo}: {_first_line(exc)}") from None
        self._lock = threading.RLock()
        self._serials: dict[str, threading.RLock] = {MEMORY_WRITES: self._lock}
        self._serials_mutex = threading.Lock()
        self._closed = False
        self.locks = PgLocks(conninfo, kwargs)
        self._migrate(tuple(MEMORY_MIGRATIONS) + tuple(extra_migrations))

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.locks.close()
                self._pool.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def schema_change(self, what: str) -> Iterator[None]:
        """PostgreSQL's DDL is transactional: a crash inside the block's `write()` rolls it back."""
        yield

    # --- access ----------------------------------------------------------------------------
    def write(self, fn: Callable[[PgConn], T], *, serial: str = MEMORY_WRITES) -> T:
        """Run `fn` in one transaction (rolled back on error).

        Writers of one `serial` take one transaction-scoped advisory lock, in every process.
        Memory's writers share the default: commits happen in the order `memory_seq` values
        were drawn, so a cache that has seen seq N has seen every row below it (the watermark
        caches rely on that, as they do on DuckDB's single writer). Delivery bookkeeping (the
        inbox, the outbox) has serials of its own, so recording that a reply went out never
        waits behind an ingest write: the shorter that wait, the smaller the window in which a
        crash leaves a sent reply unrecorded.
        """
        with self._serials_mutex:
            local = self._serials.setdefault(serial, threading.RLock())
        with local:
            try:
                with self._pool.connection() as conn, conn.transaction():
                    conn.execute(WRITE_LOCK_SQL, [serial])
                    con = PgConn(conn)
                    try:
                        return fn(con)
                    finally:
                        con.close()
            except psycopg.Error as exc:
                if _statement_fault(exc):
                    raise
                raise StoreWriteError(f"the PostgreSQL store could not be written: {_first_line(exc)}") from exc

    def read(self, fn: Callable[[PgConn], T]) -> T:
        """Run `fn` on a pooled connection inside a transaction of its own (so `SET LOCAL`
        settings of a query stay in it); each statement sees every commit before it."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                con = PgConn(conn)
                try:
                    return fn(con)
                finally:
                    con.close()
        except psycopg.OperationalError as exc:  # the server, not the query (that is ProgrammingError)
            raise StoreUnavailableError(f"the PostgreSQL store could not be read: {_first_line(exc)}") from exc

    async def awrite(self, fn: Callable[[PgConn], T], *, serial: str = MEMORY_WRITES) -> T:
        return await asyncio.to_thread(self.write, fn, serial=serial)

    async def aread(self, fn: Callable[[PgConn], T]) -> T:
        return await asyncio.to_thread(self.read, fn)

    def meta_get(self, key: str, default: str | None = None) -> str | None:
        row = self.read(lambda c: c.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone())
        return row[0] if row else default

    @staticmethod
    def meta_set(con: PgConn, key: str, value: str) -> None:
        con.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value])

    # --- migrations ------------------------------------------------------------------------
    def _migrate(self, migrations: Sequence[Migration]) -> None:
        versions = [m.version for m in migrations]
        if len(set(versions)) != len(versions):
            raise StoreError(f"duplicate migration versions: {sorted(versions)}")

        def run(con: PgConn) -> None:
            # One migrator at a time across processes: the writers' lock, held to the commit.
            con.execute("CREATE EXTENSION IF NOT EXISTS vector")
            con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, "
                        "applied_at TIMESTAMP DEFAULT now())")
            done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
            stored = con.execute("SELECT value FROM meta WHERE key = 'embedding_dim'").fetchone()
            if stored and int(stored[0]) != self.dim:
                log.info("database holds %s-d embeddings; configured %s-d (run reembed to switch)", stored[0], self.dim)
                self.dim = int(stored[0])
            for m in sorted(migrations, key=lambda m: m.version):
                if m.version in done:
                    continue
                log.info("applying migration %s (%s)", m.version, m.name)
                con.execute(POSTGRES.ddl(m, self.dim))
                con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
                self.meta_set(con, "embedding_dim", str(self.dim))

        self.write(run)
