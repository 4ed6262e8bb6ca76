"""The storage seam: what the rest of memgate asks of a store, and `open_store` choosing the
backend by URL.

Everything above memory/store/ talks to a store through `MemoryStore`: one transaction per
`write(fn)`, a read on a connection of its own per `read(fn)`, the `meta` key/value table and
`schema_change()` around DDL. DuckDB (one file, nothing to run) is the default; PostgreSQL with
pgvector serves several gateway processes on one database.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

from memory.errors import StoreError
from memory.store.schema import Migration
from memory.store.url import StoreURL, parse_store_url

T = TypeVar("T")

# Where the PostgreSQL password comes from (never the URL, never a config file). libpq also
# reads PGPASSWORD and ~/.pgpass by itself.
PASSWORD_ENV = "MEMGATE_STORE_PASSWORD"


class ProcessLocks(Protocol):
    """Locks a process holds until it releases them or dies (see memory/store/locks.py)."""

    def try_hold(self, space: int, key: int) -> bool: ...
    def release(self, space: int, key: int) -> None: ...
    def held(self, space: int) -> set[int]: ...


@runtime_checkable
class MemoryStore(Protocol):
    """A memory database: both backends implement exactly this."""

    dim: int
    backend: str                        # "duckdb" | "postgresql"
    locks: ProcessLocks                 # held while this process lives (memory/store/locks.py)

    def write(self, fn: Callable[[Any], T], *, serial: str = ...) -> T: ...
    def read(self, fn: Callable[[Any], T]) -> T: ...
    async def awrite(self, fn: Callable[[Any], T], *, serial: str = ...) -> T: ...
    async def aread(self, fn: Callable[[Any], T]) -> T: ...
    def meta_get(self, key: str, default: str | None = None) -> str | None: ...
    def meta_set(self, con: Any, key: str, value: str) -> None: ...
    def schema_change(self, what: str) -> AbstractContextManager[None]: ...
    def close(self) -> None: ...


def open_store(url: str | StoreURL, dim: int, *, extra_migrations: Sequence[Migration] = (),
               password: str | None = None) -> MemoryStore:
    """The store `url` names (`duckdb:///path/memgate.duckdb` or `postgresql://user@host/db`),
    migrated. `password` (PostgreSQL only) defaults to $MEMGATE_STORE_PASSWORD."""
    where = url if isinstance(url, StoreURL) else parse_store_url(url)
    if where.backend == "duckdb":
        from memory.store.connection import Store

        return Store(where.path, dim, extra_migrations=extra_migrations)
    try:
        from memory.store.pg import PgStore
    except ImportError as exc:
        raise StoreError(f"the PostgreSQL backend is not available ({exc.name or exc}): "
                         "pip install 'memgate[postgres]'") from None
    return PgStore(where.conninfo, dim, extra_migrations=extra_migrations,
                   password=password if password is not None else os.environ.get(PASSWORD_ENV))
