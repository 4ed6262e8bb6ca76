"""The DuckDB store: one file, extensions loaded from their PyPI packages, versioned migrations.

One writer: every write goes through one connection under a lock, inside a transaction. Reads
use cursors (their own connections to the same database). The async wrappers run the blocking
DuckDB calls in a thread so the event loop never waits on disk.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import importlib.util
import sys

import duckdb

from memory.errors import StoreError, StoreLockedError
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
                "Stop it first, or point this command at another data folder."
            ) from None
        raise StoreError(f"cannot open {path}: {exc}") from exc
    for package, name in (("duckdb_extension_vss", "vss"), ("duckdb_extension_fts", "fts")):
        con.execute(f"LOAD '{_extension_path(package, name)}'")
    return con


class Store:
    """The memory database. Owns the single writer connection."""

    def __init__(self, path: Path | str, dim: int, *, extra_migrations: Sequence[Migration] = ()) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self._con = connect(path)
        self._lock = threading.RLock()
        self._closed = False
        self._migrate(tuple(MEMORY_MIGRATIONS) + tuple(extra_migrations))

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._con.execute("CHECKPOINT")
            except duckdb.Error:
                log.warning("checkpoint on close failed", exc_info=True)
            self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- access ----------------------------------------------------------------------------
    def write(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn` on the writer connection inside one transaction (rolled back on error)."""
        with self._lock:
            self._con.execute("BEGIN TRANSACTION")
            try:
                result = fn(self._con)
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            self._con.execute("COMMIT")
            return result

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn` on a fresh cursor (its own connection; sees committed data)."""
        cur = self._con.cursor()
        try:
            return fn(cur)
        finally:
            cur.close()

    async def awrite(self, fn: Callable[[Conn], T]) -> T:
        return await asyncio.to_thread(self.write, fn)

    async def aread(self, fn: Callable[[Conn], T]) -> T:
        return await asyncio.to_thread(self.read, fn)

    def meta_get(self, key: str, default: str | None = None) -> str | None:
        row = self.read(lambda c: c.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone())
        return row[0] if row else default

    @staticmethod
    def meta_set(con: Conn, key: str, value: str) -> None:
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])

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
                    con.execute(m.sql.replace("{dim}", str(self.dim)))
                    con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
                    self.meta_set(con, "embedding_dim", str(self.dim))

                self.write(apply)


def vector_literal(vec: Sequence[float]) -> str:
    """A vector as the string DuckDB casts to FLOAT[n] (a list parameter costs ~60-90 ms, this ~1 ms)."""
    return "[" + ",".join(f"{float(x):.6g}" for x in vec) + "]"


def vectors_literal(rows: Sequence[Sequence[float]]) -> str:
    """Many vectors as one string, cast in SQL to FLOAT[n][] and unnested (bulk inserts)."""
    return "[" + ",".join(vector_literal(r) for r in rows) + "]"
