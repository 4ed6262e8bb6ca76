"""Re-embedding every memory without a window in which a crash can brick the file.

The new vectors are built beside the old ones, in `reembed_vectors` (id -> vector), batch by
batch; the old column keeps serving until the end. A killed run leaves a partial side table
that the next run resumes (rows already built are skipped), as long as the target (model and
dimension) is the same. The switch is one short transaction inside `Store.schema_change`:
retype the column if the dimension changes, copy the side table in, drop it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from memory.errors import StoreError
from memory.store.schema import RECALL_INDEXES, RECALL_INDEXES_SQL
from memory.store.connection import Conn, Store, vectors_literal

log = logging.getLogger(__name__)

SIDE = "reembed_vectors"
EmbedFn = Callable[[Sequence[str]], np.ndarray]


def prepare(store: Store, model: str, dim: int) -> int:
    """Create (or keep, when the target is the same) the side table; returns rows already built."""
    if getattr(store, "backend", "duckdb") != "duckdb":
        raise StoreError("reembed runs on DuckDB stores only for now: re-embed in DuckDB, then copy the "
                         "database to PostgreSQL")
    target = f"{model}|{dim}"
    have = store.read(lambda c: c.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [SIDE]).fetchone()[0])
    if have and store.meta_get("reembed_target") == target:
        return store.read(lambda c: c.execute(f"SELECT count(*) FROM {SIDE}").fetchone()[0])

    def create(con: Conn) -> None:
        con.execute(f"DROP TABLE IF EXISTS {SIDE}")
        con.execute(f"CREATE TABLE {SIDE} (id VARCHAR PRIMARY KEY, vec FLOAT[{dim}] NOT NULL)")
        Store.meta_set(con, "reembed_target", target)

    with store.schema_change(f"reembed: side table for {target}"):
        store.write(create)
    return 0


def build(store: Store, embed: EmbedFn, dim: int, *, batch: int = 64,
          progress: Callable[[int], None] | None = None) -> int:
    """Embed every memory not yet in the side table, one committed batch at a time."""
    done = 0
    while True:
        rows = store.read(lambda c: c.execute(
            f"""SELECT id, text FROM memories m WHERE NOT EXISTS (SELECT 1 FROM {SIDE} s WHERE s.id = m.id)
                ORDER BY id LIMIT ?""", [batch]).fetchall())
        if not rows:
            return done
        vecs = embed([t for _, t in rows])
        ids = [i for i, _ in rows]
        store.write(lambda c: c.execute(
            f"INSERT INTO {SIDE} SELECT unnest(?), unnest(?::VARCHAR::FLOAT[{dim}][])",
            [ids, vectors_literal(np.asarray(vecs).tolist())]))
        done += len(rows)
        if progress:
            progress(len(rows))


def switch(store: Store, model: str, dim: int) -> int:
    """Put the side table's vectors in place in one transaction; returns rows switched."""

    def swap(con: Conn) -> int:
        if dim != store.dim:
            con.execute("ALTER TABLE memories DROP COLUMN embedding")
            con.execute(f"ALTER TABLE memories ADD COLUMN embedding FLOAT[{dim}]")
            con.execute(RECALL_INDEXES_SQL)
        n = con.execute(f"SELECT count(*) FROM {SIDE}").fetchone()[0]
        con.execute(f"UPDATE memories SET embedding = s.vec FROM {SIDE} s WHERE memories.id = s.id")
        con.execute(f"DROP TABLE {SIDE}")
        Store.meta_set(con, "embedding_dim", str(dim))
        Store.meta_set(con, "embedding_model", model)
        con.execute("DELETE FROM meta WHERE key = 'reembed_target'")
        return n

    def drop_indexes(con: Conn) -> None:
        # DuckDB refuses to drop a column that an indexed column follows, also when the index
        # is dropped in the same transaction: the recall indexes go first, and the swap makes
        # them again (a crash in between leaves them to the swap of the resumed reembed).
        for name in RECALL_INDEXES:
            con.execute(f"DROP INDEX IF EXISTS {name}")

    with store.schema_change(f"reembed: switch to {model} ({dim}-d)"):
        if dim != store.dim:
            store.write(drop_indexes)
        n = store.write(swap)
    store.dim = dim
    return n
