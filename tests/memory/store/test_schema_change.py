"""Schema changes cannot brick the file: a process SIGKILLed right after an ALTER TABLE on
`memories` (committed, not yet checkpointed: the WAL DuckDB 1.5.5 cannot replay) reopens with
every row, and the change can simply be made again."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from memory.store.connection import Store
from tests.reliability.memgate_cli import read_memories, seed_memories

ROOT = str(Path(__file__).resolve().parents[3])

KILLED_IN_DDL = textwrap.dedent("""
    import os, signal, sys
    from memory.store.connection import Store
    store = Store(sys.argv[1], 384)
    with store.schema_change("test: add a column"):
        store.write(lambda c: c.execute("ALTER TABLE memories ADD COLUMN mood VARCHAR"))
        os.kill(os.getpid(), signal.SIGKILL)  # committed, not yet checkpointed
""")

RAW_DDL = textwrap.dedent("""
    import os, signal, sys
    from memory.store.connection import Store
    store = Store(sys.argv[1], 384)
    store.write(lambda c: c.execute("ALTER TABLE memories ADD COLUMN mood VARCHAR"))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _kill_in(script: str, db: Path) -> int:
    return subprocess.run([sys.executable, "-c", script, str(db)], cwd=ROOT, capture_output=True, timeout=120).returncode


def test_sigkill_after_an_alter_inside_schema_change_reopens_with_every_row(tmp_path):
    db = tmp_path / "data" / "memgate.duckdb"
    before = seed_memories(db, 50)
    assert _kill_in(KILLED_IN_DDL, db) == -9
    assert (db.parent / "memgate.duckdb.ddl-in-progress").exists()
    after, dim, lens = read_memories(db)
    assert after == before and dim == 384 and lens == {384}
    assert not (db.parent / "memgate.duckdb.ddl-in-progress").exists()
    store = Store(db, 384)  # the change can be made again
    try:
        with store.schema_change("again"):
            store.write(lambda c: c.execute("ALTER TABLE memories ADD COLUMN mood VARCHAR"))
        assert store.read(lambda c: c.execute("SELECT count(mood IS NULL) FROM memories").fetchone()[0]) == 50
    finally:
        store.close()


def test_the_same_kill_without_the_bracket_is_what_bricked_the_file(tmp_path):
    """Keeps the reason for `schema_change` honest: if DuckDB ever replays this WAL, drop the bracket."""
    db = tmp_path / "data" / "memgate.duckdb"
    seed_memories(db, 5)
    assert _kill_in(RAW_DDL, db) == -9
    try:
        Store(db, 384).close()
    except Exception as exc:
        assert "WAL" in str(exc)
    else:
        raise AssertionError("DuckDB now replays an uncheckpointed ALTER TABLE: schema_change may be simplified")
