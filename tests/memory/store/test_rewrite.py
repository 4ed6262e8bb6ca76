"""A forgotten text leaves the disk, not only the tables: DuckDB keeps old row versions in freed
blocks, so a forget asks for a rewrite of the file (memory/store/compact.py), which the engine
runs in the background and a closing store runs before it lets go. The rewrite keeps every live
row, sequence and index, lets reads and writes of other threads wait and go on, and a SIGKILL
at any of its stages loses nothing and leaves no forgotten text once the file is opened again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from memory.engine import MemoryEngine
from memory.store.compact import PENDING_KEY, attach, pending_spaces, rewrite
from memory.store.connection import Store
from tests.bytescan import find, install_plain_duckdb

ROOT = str(Path(__file__).resolve().parents[3])
GONE, KEPT = "ZEBRAQUILL4471", "MANGOFJORD9902"


@pytest.fixture(autouse=True)
def plain_files():
    """Strings stored uncompressed, so the byte scan sees every row and freed block (tests/bytescan.py)."""
    undo = install_plain_duckdb()
    yield
    undo()


def engine_on(path: Path, embedder) -> MemoryEngine:
    return MemoryEngine(Store(path, 384), embedder, None)


async def two_people(engine: MemoryEngine) -> str:
    """u1 says GONE twice (a pinned fact and again), u2 says KEPT; returns u1's fact id."""
    await engine.ensure_space("u1", "user")
    await engine.ensure_space("u2", "user")
    fact = await engine.remember(f"my locker code is {GONE}", "u1", pinned=True)
    await engine.remember(f"remember: the locker code {GONE} again", "u1")
    await engine.remember(f"my bike is called {KEPT}", "u2", pinned=True)
    engine.store.write(lambda c: c.execute("CHECKPOINT"))  # the text is in the file's blocks now
    return fact.id


async def test_a_forgotten_marker_is_in_no_file_once_the_store_is_closed(tmp_path, embedder):
    """The issue's observation: /forget, no table holds the marker, yet its bytes were in
    memgate.duckdb. The other person's marker is found there (the scan sees into the file)."""
    engine = engine_on(tmp_path / "data" / "memgate.duckdb", embedder)
    await two_people(engine)
    ids = [r.id for r in await engine.list(["u1"], kinds=("fact",), limit=10)]
    await engine.forget(ids, ["u1"])
    await engine.rewrites.stop()   # no background run: the close does it
    assert not engine.store.read(lambda c: c.execute(
        "SELECT count(*) FROM memories WHERE text LIKE ?", [f"%{GONE}%"]).fetchone()[0])
    engine.store.close()
    found = find(tmp_path / "data", [GONE, KEPT])
    assert found[GONE] == []
    assert "memgate.duckdb" in found[KEPT]


async def test_the_running_engine_rewrites_in_the_background_after_a_forget(tmp_path, embedder):
    engine = engine_on(tmp_path / "data" / "memgate.duckdb", embedder)
    engine.rewrites.delay = engine.rewrites.quiet = 0
    try:
        fact = await two_people(engine)
        others = [r.id for r in await engine.list(["u1"], kinds=("fact",), limit=10) if r.id != fact]
        await engine.forget([fact, *others], ["u1"])
        await engine.rewrites.idle()
        assert pending_spaces(engine.store) is None
        found = find(tmp_path / "data", [GONE, KEPT])
        assert found[GONE] == [] and "memgate.duckdb" in found[KEPT]
        # The store goes on: reads, writes, search, the sequence past every old seq.
        await engine.remember("a new fact after the rewrite", "u2")
        hits = await engine.search(KEPT, ["u2"])
        assert hits and KEPT in hits[0].text
        seqs = engine.store.read(lambda c: c.execute("SELECT count(*), count(DISTINCT seq) FROM memories").fetchone())
        assert seqs[0] == seqs[1]
    finally:
        engine.store.close()


def test_the_rewrite_keeps_every_live_row_index_and_sequence(tmp_path):
    store = Store(tmp_path / "memgate.duckdb", 384)
    try:
        def seed(c):
            c.execute("INSERT INTO spaces VALUES ('s', 'user', 'n', now())")
            c.execute("""INSERT INTO memories (id, space_id, kind, title, text, search_text, created_at, updated_at)
                         SELECT 'm' || i, 's', 'fact', 't', 'text ' || i, 'text', now(), now() FROM range(500) t(i)""")
        store.write(seed)
        schema = "SELECT table_name, sql FROM duckdb_tables() ORDER BY 1"
        indexes = "SELECT index_name, sql FROM duckdb_indexes() ORDER BY 1"
        before = store.read(lambda c: (c.execute(schema).fetchall(), c.execute(indexes).fetchall(),
                                       c.execute("SELECT max(seq) FROM memories").fetchone()[0]))
        store.write(lambda c: Store.meta_set(c, PENDING_KEY, "[]"))
        assert rewrite(store) is not None
        after = store.read(lambda c: (c.execute(schema).fetchall(), c.execute(indexes).fetchall(),
                                      c.execute("SELECT max(seq) FROM memories").fetchone()[0]))
        assert after == before
        new_seq = store.write(lambda c: c.execute(
            """INSERT INTO memories (id, space_id, kind, title, text, search_text, created_at, updated_at)
               VALUES ('new', 's', 'fact', 't', 'x', 'x', now(), now()) RETURNING seq""").fetchone()[0])
        assert new_seq > before[2]
        assert pending_spaces(store) is None
    finally:
        store.close()


def test_reads_and_writes_of_other_threads_wait_for_the_swap_and_none_is_lost(tmp_path):
    store = Store(tmp_path / "memgate.duckdb", 384)
    store.write(lambda c: c.execute("CREATE TABLE t (i INTEGER)"))
    stop, done, errors = threading.Event(), [], []

    def writer(k: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                store.write(lambda c, v=k * 100000 + i: c.execute("INSERT INTO t VALUES (?)", [v]))
                done.append(k * 100000 + i)
                store.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone())
            except Exception as exc:  # noqa: BLE001 - any error fails the test below
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            store.write(lambda c: Store.meta_set(c, PENDING_KEY, "[]"))
            assert rewrite(store) is not None
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    have = set(store.read(lambda c: [r[0] for r in c.execute("SELECT i FROM t").fetchall()]))
    store.close()
    assert have == set(done) and done


# --- SIGKILL at each stage ---------------------------------------------------------------
KILLED_AT = textwrap.dedent("""
    import os, signal, sys
    from tests.bytescan import install_plain_duckdb
    install_plain_duckdb()
    import memory.store.compact as compact
    import memory.store.file_swap as file_swap
    from memory.store.connection import Store
    stage = sys.argv[2]
    store = Store(sys.argv[1], 384)  # a bare store: the pending rewrite is left to us
    # A write the WAL alone holds when the rewrite starts: the copy must carry it.
    store.write(lambda c: c.execute(
        "INSERT INTO memories (id, space_id, kind, title, text, search_text, created_at, updated_at) "
        "VALUES ('late', 'u2', 'fact', 't', 'written just before the rewrite', 'x', now(), now())"))
    assert os.path.exists(sys.argv[1] + ".wal")

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def at(name):
        if name == stage:
            die()

    real_swap, real_replace, replaced = file_swap.swap, os.replace, []
    if stage == "closed":
        file_swap.swap = lambda path: die()
    def replace(a, b):
        real_replace(a, b)
        replaced.append(b)
        if (stage == "wal set aside" and len(replaced) == 1) or (stage == "renamed" and len(replaced) == 2):
            die()
    os.replace = replace
    compact.rewrite(store, stage=at)
""")


def _seed_forgotten(db: Path) -> int:
    """A file whose forgotten fact's bytes are still in its freed blocks (the rewrite pending)."""
    from memory.forget import forget
    from datetime import UTC, datetime

    store = Store(db, 384)
    try:
        def seed(c):
            c.execute("INSERT INTO spaces VALUES ('u1', 'user', 'n', now()), ('u2', 'user', 'n', now())")
            c.execute("""INSERT INTO memories (id, space_id, kind, title, text, search_text, created_at, updated_at)
                         SELECT 'm' || i, 'u2', 'fact', 't', ? || ' ' || i, 'x', now(), now() FROM range(300) t(i)""", [KEPT])
            c.execute("""INSERT INTO memories (id, space_id, kind, title, text, search_text, created_at, updated_at)
                         VALUES ('gone', 'u1', 'fact', 't', ?, 'x', now(), now())""", [f"code {GONE}"])
        store.write(seed)
        store.write(lambda c: c.execute("CHECKPOINT"))
        store.write(lambda c: forget(c, ["gone"], ["u1"], datetime.now(UTC)))
        store.write(lambda c: c.execute("CHECKPOINT"))
    finally:
        store.close()  # a bare store (no engine) leaves the rewrite pending, as a crash would
    return 300


@pytest.mark.parametrize("stage", ["copying", "copied", "swapping", "swapped", "closed", "wal set aside", "renamed"])
def test_a_rewrite_killed_at_any_stage_loses_nothing_and_finishes_at_the_next_open(tmp_path, stage):
    db = tmp_path / "data" / "memgate.duckdb"
    kept = _seed_forgotten(db)
    assert find(db.parent, [GONE])[GONE] == ["memgate.duckdb"]   # what the rewrite is for
    run = subprocess.run([sys.executable, "-c", KILLED_AT, str(db), stage], cwd=ROOT, capture_output=True, timeout=300)
    assert run.returncode == -9, run.stderr.decode()[-2000:]
    store = Store(db, 384)
    attach(store)                               # as the engine does: finish what the kill interrupted
    try:
        n = store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE space_id = 'u2' AND text LIKE ?",
                                           [f"{KEPT}%"]).fetchone()[0])
        assert n == kept
        assert store.read(lambda c: c.execute("SELECT text FROM memories WHERE id = 'late'").fetchone()) \
            == ("written just before the rewrite",)
        assert pending_spaces(store) is None
    finally:
        store.close()
    found = find(db.parent, [GONE, KEPT])
    assert found[GONE] == [] and found[KEPT] == ["memgate.duckdb"]
    assert sorted(p.name for p in db.parent.iterdir()) == ["memgate.duckdb"]
