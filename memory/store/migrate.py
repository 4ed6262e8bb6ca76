"""Copy one memgate database into another (DuckDB -> PostgreSQL, or back): every table of the
schema, in batches, resumable after a kill, checked by counts at the end.

How: both stores are opened with the same migrations (`memgate migrate` opens them as the
gateway does, with every layer's), so the target has every table, empty.
Each table is read in key order by keyset pagination (`WHERE (key) > (last) ORDER BY key
LIMIT n`, never OFFSET: every batch costs the same) and written set-based (COPY on
PostgreSQL, one `INSERT ... SELECT unnest(...)` on DuckDB). The last key copied is written to
the target's `meta` in the same transaction as its batch, so a run killed at any point
resumes at the first row not committed: no row twice, none missing. A table without a primary
key pages by the source's physical row id (DuckDB `rowid`, PostgreSQL `ctid`): stable while
nothing writes the source, which the migration requires (stop the gateway first).

Not copied: `schema_migrations` (the target has its own), the keyword postings (`fts_*`, a
snapshot derived from `memories`: rebuilt on the target at the end) and their meta keys.
Sequences are set past the copied maxima so new rows do not collide.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import StoreError
from memory.store.backend import MemoryStore
from memory.store.dialect import dialect_of
from memory.store.postings_cache import (
    DICT,
    GENERATION_KEY,
    POSTINGS,
    STATS,
    WATERMARK_KEY,
)
from memory.store.url import StoreURL, parse_store_url

SOURCE_KEY = "migrate.source"        # which database the target is being filled from
DONE_KEY = "migrate.done"
MARK_PREFIX = "migrate.mark."        # + table: JSON of the last key copied, or "done"
INDEX_PREFIX = "migrate.index."      # + index: its definition, while it is dropped for the copy
SKIPPED = frozenset({"meta", "schema_migrations", POSTINGS, DICT, STATS})
META_SKIPPED = frozenset({"embedding_dim", WATERMARK_KEY, GENERATION_KEY})
# Tables others point at go first (there are no declared foreign keys; these are the logical
# ones: every per-space row names a space, facts and versions name memories).
FIRST = ("spaces", "memories")
ROW_ID = "__row"                      # the alias of the physical row id for keyless tables

Progress = Callable[[str, int, int], None]   # (table, rows done, rows in total)


@dataclass(frozen=True, slots=True)
class TablePlan:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]              # () = page by the physical row id
    vectors: frozenset[str]           # columns holding embeddings


@dataclass(frozen=True, slots=True)
class TableCount:
    table: str
    source: int
    target: int

    @property
    def ok(self) -> bool:
        return self.source == self.target


@dataclass(frozen=True, slots=True)
class MigrateResult:
    counts: tuple[TableCount, ...]
    copied: int                       # rows written by this run
    copy_s: float = 0.0               # seconds spent copying rows
    finish_s: float = 0.0             # seconds for indexes, sequences and the keyword index

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.counts)


# --- catalog ------------------------------------------------------------------------------
def _tables(con: Any) -> dict[str, tuple[str, ...]]:
    """{table: primary-key columns} of the store's own schema."""
    if dialect_of(con).postgres:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE'").fetchall()]
        keys = con.execute(
            "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name "
            "AND kcu.table_schema = tc.table_schema AND kcu.table_name = tc.table_name "
            "WHERE tc.table_schema = current_schema() AND tc.constraint_type = 'PRIMARY KEY' "
            "ORDER BY tc.table_name, kcu.ordinal_position").fetchall()
        out: dict[str, tuple[str, ...]] = {n: () for n in names}
        for table, col in keys:
            out[table] = (*out[table], col)
        return out
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary").fetchall()]
    out = {n: () for n in names}
    for table, cols in con.execute(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND constraint_type = 'PRIMARY KEY'").fetchall():
        out[table] = tuple(cols)
    return out


def _columns(con: Any, table: str) -> list[tuple[str, str, str | None]]:
    """(name, type, default) of a table's columns in order."""
    if dialect_of(con).postgres:
        return [tuple(r) for r in con.execute(
            "SELECT column_name, udt_name, column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()]
    return [tuple(r) for r in con.execute(
        "SELECT column_name, data_type, column_default FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? ORDER BY column_index", [table]).fetchall()]


def _is_vector(type_name: str) -> bool:
    return type_name == "vector" or bool(re.fullmatch(r"FLOAT\[\d+\]", type_name))


def plan(source: MemoryStore, target: MemoryStore) -> list[TablePlan]:
    """The tables to copy, in copy order, with the columns both sides have."""
    src = source.read(_tables)
    dst = target.read(_tables)
    plans = []
    for name in sorted(set(src) & set(dst) - SKIPPED, key=lambda n: (FIRST.index(n) if n in FIRST else len(FIRST), n)):
        src_cols = {c[0] for c in source.read(lambda con, name=name: _columns(con, name))}
        dst_cols = target.read(lambda con, name=name: _columns(con, name))
        cols = tuple(c[0] for c in dst_cols if c[0] in src_cols)
        vectors = frozenset(c[0] for c in dst_cols if _is_vector(c[1]))
        plans.append(TablePlan(name, cols, dst[name] if dst[name] == src[name] else (), vectors))
    return plans


# --- reading and writing --------------------------------------------------------------------
def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _row_id(con: Any) -> str:
    return "ctid" if dialect_of(con).postgres else "rowid"


def _page(con: Any, t: TablePlan, after: list[Any] | None, limit: int) -> list[tuple]:
    """The next `limit` rows after key `after` (None = from the start), key columns last.

    Vectors come as their text form (`[0.1, ...]`, shortest round-trip digits, so exact): both
    backends parse it back, and it skips a Python float per element (~75% of a batch's time)."""
    cols = ", ".join(f"CAST({_quote(c)} AS VARCHAR)" if c in t.vectors else _quote(c) for c in t.columns)
    table = _quote(t.name)
    if t.key:
        key = ", ".join(_quote(c) for c in t.key)
        where = f"WHERE ({key}) > ({', '.join('?' for _ in t.key)})" if after is not None else ""
        params = list(after) if after is not None else None
        if dialect_of(con).postgres:  # the primary key's index serves the range
            return con.execute(f"SELECT {cols}, {key} FROM {table} {where} ORDER BY {key} LIMIT {int(limit)}",
                               params).fetchall()
        # DuckDB sorts every row past `after` with all its columns (1 s a batch at 130k rows, 5 s
        # with the vector cast): choose the page by key alone, then fetch those rows by row id.
        return con.execute(f"SELECT {cols}, {key} FROM {table} WHERE rowid IN (SELECT rowid FROM {table} {where} "
                           f"ORDER BY {key} LIMIT {int(limit)}) ORDER BY {key}", params).fetchall()
    rid = _row_id(con)
    cast = "::tid" if rid == "ctid" else ""
    where = f"WHERE {rid} > ?{cast}" if after is not None else ""
    sql = f"SELECT {cols}, {rid}{'::text' if cast else ''} AS {ROW_ID} FROM {table} {where} ORDER BY {rid} LIMIT {int(limit)}"
    return con.execute(sql, [after[0]] if after is not None else None).fetchall()


def _insert(con: Any, t: TablePlan, rows: Sequence[Sequence[Any]], dim: int) -> None:
    """Write `rows` (the table's columns in order, vectors as text) set-based."""
    if dialect_of(con).postgres:
        con.copy_rows(_quote(t.name), ", ".join(_quote(c) for c in t.columns), rows)
        return
    # DuckDB: one INSERT of the columns as bound lists, vectors parsed from their text.
    cols = list(zip(*rows))
    params, exprs = [], []
    for i, c in enumerate(t.columns):
        exprs.append(f"unnest(?::VARCHAR[])::FLOAT[{dim}]" if c in t.vectors else "unnest(?)")
        params.append([_plain(v) for v in cols[i]])
    names = ", ".join(_quote(c) for c in t.columns)
    con.execute(f"INSERT INTO {_quote(t.name)} ({names}) SELECT {', '.join(exprs)}", params)


def _plain(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v


def _key_json(values: Sequence[Any]) -> str:
    return json.dumps([v.isoformat() if hasattr(v, "isoformat") else v for v in values])


def _key_values(text: str) -> list[Any]:
    # Keys are strings or integers (a timestamp travels as ISO text, which both backends compare
    # with a TIMESTAMP column); a PostgreSQL row id travels as its text form, cast back to tid.
    return list(json.loads(text))


def _count(store: MemoryStore, table: str) -> int:
    return int(store.read(lambda c: c.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()[0]))


# --- the migration --------------------------------------------------------------------------
def check_urls(source_url: str, target_url: str) -> tuple[StoreURL, StoreURL]:
    """Both URLs parsed, refused (one StoreError line) when they name the same database or the
    source file is not there (opening it would create an empty one)."""
    src, dst = parse_store_url(source_url), parse_store_url(target_url)
    if str(src) == str(dst):
        raise StoreError("the source and the target are the same database")
    if src.backend == "duckdb" and not (src.path == ":memory:" or Path(src.path).exists()):
        raise StoreError(f"the source database {src.path} does not exist")
    return src, dst


def copy_store(source: MemoryStore, target: MemoryStore, source_name: str, *, batch: int = 2000,
               progress: Progress | None = None) -> MigrateResult:
    """Copy `source` (named `source_name`, its URL) into `target`, both opened with the same
    migrations. Raises StoreError (one line) for a target holding data not from this source."""
    if batch < 1:
        raise StoreError(f"--batch must be at least 1 (got {batch})")
    return _run(source, target, source_name, batch, progress)


def _run(source: MemoryStore, target: MemoryStore, source_name: str, batch: int,
         progress: Progress | None) -> MigrateResult:
    if target.dim != source.dim:
        raise StoreError(f"the target holds {target.dim}-d embeddings, the source {source.dim}-d")
    tables = plan(source, target)
    _claim(target, tables, source_name)
    copied, t0 = 0, time.perf_counter()
    for t in tables:
        copied += _copy_table(source, target, t, batch, progress)
    t1 = time.perf_counter()
    _finish(source, target, tables)
    t2 = time.perf_counter()
    counts = tuple(TableCount(t.name, _count(source, t.name), _count(target, t.name)) for t in tables)
    return MigrateResult(counts, copied, t1 - t0, t2 - t1)


def _claim(target: MemoryStore, tables: Sequence[TablePlan], source_name: str) -> None:
    """Mark the target as this source's copy; refuse one that holds anything else."""
    def claim(con: Any) -> None:
        row = con.execute("SELECT value FROM meta WHERE key = ?", [SOURCE_KEY]).fetchone()
        if row is not None:
            if row[0] != source_name:
                raise StoreError(f"the target is a copy of another database ({row[0]}): use an empty target")
            return
        for t in tables:
            if con.execute(f"SELECT 1 FROM {_quote(t.name)} LIMIT 1").fetchone() is not None:
                raise StoreError(f"the target already holds data (table {t.name} is not empty): "
                                 "migrate into an empty database")
        target.meta_set(con, SOURCE_KEY, source_name)
        _defer_indexes(con, target)

    target.write(claim)


def _defer_indexes(con: Any, target: MemoryStore) -> None:
    """PostgreSQL: drop the HNSW indexes until the rows are in (one CREATE INDEX over 130k
    vectors is minutes faster than as many inserts into the graph). Their definitions wait in
    `meta`, dropped in the same transaction, so a killed run still recreates them."""
    if not dialect_of(con).postgres:
        return
    for name, definition in con.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexdef ILIKE '% USING hnsw %'").fetchall():
        target.meta_set(con, INDEX_PREFIX + name, definition)
        con.execute(f"DROP INDEX {_quote(name)}")


def _restore_indexes(target: MemoryStore, tables: Sequence[TablePlan]) -> None:
    def write(con: Any) -> None:
        # The graph is built in memory when it fits (64 MB by default holds ~25k 384-d vectors).
        con.execute("SET LOCAL maintenance_work_mem = '512MB'")
        for key, definition in con.execute("SELECT key, value FROM meta WHERE key LIKE ?", [INDEX_PREFIX + "%"]).fetchall():
            con.execute(definition)
            con.execute("DELETE FROM meta WHERE key = ?", [key])
        for t in tables:  # the planner's statistics of the copied rows (autovacuum would be later)
            con.execute(f"ANALYZE {_quote(t.name)}")

    if target.backend == "postgresql":
        target.write(write)


def _copy_table(source: MemoryStore, target: MemoryStore, t: TablePlan, batch: int,
                progress: Progress | None) -> int:
    mark = MARK_PREFIX + t.name
    state = target.meta_get(mark)
    total = _count(source, t.name)
    if state == "done":
        if progress:
            progress(t.name, total, total)
        return 0
    after = _key_values(state) if state else None
    done = _count(target, t.name)
    if progress:
        progress(t.name, done, total)
    n_key = len(t.key) or 1
    copied = 0
    while True:
        rows = source.read(lambda con, after=after: _page(con, t, after, batch))
        if not rows:
            break
        last = list(rows[-1][-n_key:])
        body = [r[:-n_key] for r in rows]

        def write(con: Any, body=body, last=last) -> None:
            _insert(con, t, body, target.dim)
            target.meta_set(con, mark, _key_json(last))

        target.write(write)
        after = last
        copied += len(rows)
        done += len(rows)
        if progress:
            progress(t.name, done, total)
        if len(rows) < batch:
            break
    target.write(lambda con: target.meta_set(con, mark, "done"))
    return copied


def _finish(source: MemoryStore, target: MemoryStore, tables: Sequence[TablePlan]) -> None:
    """The source's meta settings, sequences past the copied maxima, the keyword index."""
    from memory.store.keywords import rebuild_index

    meta = source.read(lambda c: c.execute("SELECT key, value FROM meta").fetchall())

    def write(con: Any) -> None:
        for key, value in meta:
            if key not in META_SKIPPED and not key.startswith("migrate."):
                target.meta_set(con, key, value)
        for table, column, seq in _sequences(con):
            top = con.execute(f"SELECT max({_quote(column)}) FROM {_quote(table)}").fetchone()[0]
            if top is not None:
                _advance(con, seq, int(top))

    target.write(write)
    _restore_indexes(target, tables)
    if target.meta_get(DONE_KEY) is None:
        rebuild_index(target)  # type: ignore[arg-type]
        target.write(lambda con: target.meta_set(con, DONE_KEY, "1"))


def _sequences(con: Any) -> list[tuple[str, str, str]]:
    """(table, column, sequence) of every column whose default draws from a sequence."""
    out = []
    for table in _tables(con):
        for name, _type, default in _columns(con, table):
            m = re.search(r"nextval\('([^']+)'", default or "")
            if m:
                out.append((table, name, m.group(1)))
    return out


def _advance(con: Any, seq: str, top: int) -> None:
    """Make the sequence's next value greater than `top`."""
    if dialect_of(con).postgres:
        con.execute("SELECT setval(?, greatest(?, (SELECT last_value FROM " + _quote(seq) + ")))", [seq, top])
        return
    # DuckDB cannot set a sequence: draw values until it is past `top` (one statement).
    now = int(con.execute(f"SELECT nextval('{seq}')").fetchone()[0])
    if now < top:
        con.execute(f"SELECT max(nextval('{seq}')) FROM range(?)", [top - now])
