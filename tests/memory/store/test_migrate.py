"""`memgate migrate`: a real DuckDB file made by the real engine copied into the session's
PostgreSQL (and back) with every row, vector and counter; resumed after a SIGKILL midway;
refusals and bad URLs as one line."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest

from bot.app import open_store
from bot.settings import Settings
from memory.engine import MemoryEngine
from memory.errors import StoreError
from memory.store.migrate import MARK_PREFIX, MigrateResult, check_urls, copy_store
from memory.store.rows import NewMemory, ensure_space, insert_memories

pytestmark = pytest.mark.postgres
ROOT = str(Path(__file__).resolve().parents[3])
T0 = datetime(2026, 1, 1)
FACTS = {
    "alice": ["I play the cello in a community orchestra", "My sister lives in Lisbon", "I am allergic to peanuts",
              "我每天早上骑自行车上班", "Rehearsals are on Monday evenings"],
    "bob": ["I grow tomatoes on my balcony", "My dog is called Pixel", "I work night shifts at the hospital",
            "我喜欢在雨天看书"],
}
BULK = 1500   # extra rows so a --batch 50 run takes long enough to be killed midway


def _dump(store, table: str, order: str) -> list[tuple]:
    return store.read(lambda c: [tuple(r) for r in c.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()])


def _hnsw(store) -> list[str]:
    return store.read(lambda c: [r[0] for r in c.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexdef ILIKE '% USING hnsw %'").fetchall()])


def _open(url: str):
    """A store with every layer's migrations, opened as the gateway opens it (its data folder is
    never used by a PostgreSQL store: a fresh one so nothing shared is touched)."""
    return open_store(Settings(data_dir=tempfile.mkdtemp(prefix="memgate-migrate-"), store={"url": url}))


def migrate(source_url: str, target_url: str, batch: int = 2000) -> MigrateResult:
    src, dst = check_urls(source_url, target_url)
    with _open(str(src)) as source, _open(str(dst)) as target:
        return copy_store(source, target, str(src), batch=batch)


@pytest.fixture(scope="module")
def source_file(tmp_path_factory, embedder) -> Path:
    """A DuckDB file with real memories (the engine's remember, the real embedder), bulk rows and
    rows in tables without a primary key."""
    path = tmp_path_factory.mktemp("src") / "old.duckdb"
    store = _open(f"duckdb://{path}")
    engine = MemoryEngine(store, embedder, None)

    async def fill():
        for space, facts in FACTS.items():
            await engine.ensure_space(space, "user", space.title())
            for text in facts:
                await engine.remember(text, space)
    asyncio.run(fill())
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((BULK, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)

    def bulk(con):
        ensure_space(con, "crowd", "user", None, T0)
        insert_memories(con, [NewMemory(space_id="crowd", kind="fact", text=f"crowd note {i} o'clock", title="",
                                        created_at=T0, id=f"crowd-{i:05d}") for i in range(BULK)], vecs)
        for i in range(120):  # link_attempts has no primary key: paged by row id
            con.execute("INSERT INTO link_attempts VALUES (?, ?, ?, ?)", ["telegram", f"u{i % 3}", T0, i % 2 == 0])
    store.write(bulk)
    store.close()
    return path


@pytest.fixture
def old_db(source_file, tmp_path) -> Path:
    path = tmp_path / "old.duckdb"
    shutil.copy(source_file, path)
    return path




def test_every_row_vector_and_counter_arrives_and_recall_agrees(old_db, pg_url, embedder, tmp_path):
    result = migrate(f"duckdb://{old_db}", pg_url, batch=64)
    assert result.ok and result.copied > BULK
    counts = {c.table: c.target for c in result.counts}
    assert counts["memories"] == BULK + sum(map(len, FACTS.values())) and counts["spaces"] == 3
    assert counts["link_attempts"] == 120
    src, dst = _open(f"duckdb://{old_db}"), _open(pg_url)
    try:
        for table, order in (("memories", "id"), ("spaces", "id"), ("link_attempts", "external_id")):
            a, b = _dump(src, table, order), _dump(dst, table, order)
            if table != "memories":
                assert sorted(a) == sorted(b)
                continue
            assert [r[0] for r in a] == [r[0] for r in b]
            cols = src.read(lambda c: [d[0] for d in c.execute("SELECT * FROM memories LIMIT 0").description])
            emb = cols.index("embedding")
            for ra, rb in zip(a, b):
                assert np.allclose(np.asarray(ra[emb], dtype=np.float32), rb[emb], atol=1e-6)
                assert [v for i, v in enumerate(ra) if i != emb] == [v for i, v in enumerate(rb) if i != emb]
        # the copy's sequence is past the copied seqs: a new memory gets a fresh one
        top = dst.read(lambda c: c.execute("SELECT max(seq) FROM memories").fetchone()[0])
        assert dst.read(lambda c: c.execute("SELECT nextval('memory_seq')").fetchone()[0]) > top
        for q, space in (("what instrument do I play", "alice"), ("pets", "bob"), ("自行车", "alice")):
            got = [asyncio.run(MemoryEngine(s, embedder, None).search(q, [space], limit=5)) for s in (src, dst)]
            assert [h.id for h in got[0]] == [h.id for h in got[1]] and got[0]
        assert dst.meta_get(MARK_PREFIX + "memories") == "done"
        assert _hnsw(dst) == ["memories_embedding_hnsw"]   # dropped for the copy, built again
    finally:
        src.close()
        dst.close()
    # and back: PostgreSQL -> DuckDB gives the same rows
    back = tmp_path / "back.duckdb"
    again = migrate(pg_url, f"duckdb://{back}", batch=500)
    assert again.ok and {c.table: c.target for c in again.counts} == counts


def _cli(*args: str, env_extra: dict | None = None, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
    env.update({"PYTHONPATH": ROOT, "MEMGATE_CONFIG": os.devnull, **(env_extra or {})})
    return [sys.executable, "-m", "bot.cli", "migrate", *args], env


def test_a_sigkilled_migration_resumes_to_exactly_the_sources_rows(old_db, pg_url, tmp_path):
    cmd, env = _cli("--from", f"duckdb://{old_db}", "--to", pg_url, "--batch", "50")
    env["MEMGATE_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    conninfo = pg_url
    seen = 0
    try:
        while proc.poll() is None:  # wait for the first committed batches of memories, then kill
            try:
                with psycopg.connect(conninfo) as c:
                    seen = c.execute("SELECT count(*) FROM memories").fetchone()[0]
            except psycopg.Error:
                seen = 0
            if seen >= 200:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    with psycopg.connect(conninfo) as c:
        midway = c.execute("SELECT count(*) FROM memories").fetchone()[0]
    assert 0 < midway < BULK
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "memories" in done.stdout and " NO" not in done.stdout
    with psycopg.connect(conninfo) as c:
        ids = [r[0] for r in c.execute("SELECT id FROM memories ORDER BY id").fetchall()]
        attempts = c.execute("SELECT count(*) FROM link_attempts").fetchone()[0]
    src = _open(f"duckdb://{old_db}")
    try:
        assert ids == [r[0] for r in _dump(src, "memories", "id")]
        assert attempts == 120
        with _open(pg_url) as dst:
            assert _hnsw(dst) == ["memories_embedding_hnsw"]
    finally:
        src.close()


def test_a_target_with_other_data_is_refused(old_db, pg_url, tmp_path):
    with _open(pg_url) as dst:
        dst.write(lambda c: ensure_space(c, "someone", "user", None, T0))
    with pytest.raises(StoreError, match="already holds data"):
        migrate(f"duckdb://{old_db}", pg_url)
    other = tmp_path / "other.duckdb"
    _open(f"duckdb://{other}").close()
    mine = tmp_path / "mine.duckdb"
    migrate(f"duckdb://{other}", f"duckdb://{mine}")
    with pytest.raises(StoreError, match="copy of another database"):
        migrate(f"duckdb://{old_db}", f"duckdb://{mine}")
    with pytest.raises(StoreError, match="same database"):
        migrate(f"duckdb://{old_db}", f"duckdb://{old_db}")
    # finished: running it again copies nothing and checks the counts again
    again = migrate(f"duckdb://{other}", f"duckdb://{mine}")
    assert again.ok and again.copied == 0


@pytest.mark.parametrize("source, target, says", [
    ("duckdb:///nowhere/old.duckdb", "duckdb:///tmp/x.duckdb", "does not exist"),
    ("duckdb://relative.duckdb", "duckdb:///tmp/x.duckdb", "must be absolute"),
    ("OLD", "duckdb:///tmp/x.duckdb", "has no scheme"),
    ("{old}", "postgresql://bob:hunter2@localhost/db", "contains a password"),
    ("{old}", "postgresql://bob@127.0.0.1:1/db", "cannot connect"),
    ("{old}", "mysql://bob@host/db", "unknown scheme"),
])
def test_bad_urls_are_one_line(old_db, tmp_path, source, target, says):
    cmd, env = _cli("--from", source.format(old=f"duckdb://{old_db}"), "--to", target)
    env["MEMGATE_DATA_DIR"] = str(tmp_path / "data")
    got = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert got.returncode == 1 and says in got.stderr, got.stderr
    assert len(got.stderr.strip().splitlines()) == 1 and "Traceback" not in got.stderr
    assert "hunter2" not in got.stderr


def test_a_count_that_differs_exits_1_with_one_line(old_db, tmp_path):
    target = tmp_path / "new.duckdb"
    cmd, env = _cli("--from", f"duckdb://{old_db}", "--to", f"duckdb://{target}")
    env["MEMGATE_DATA_DIR"] = str(tmp_path / "data")
    assert subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120).returncode == 0
    with _open(f"duckdb://{target}") as dst:   # a row lost after the copy
        dst.write(lambda c: c.execute("DELETE FROM memories WHERE id = 'crowd-00007'"))
    got = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert got.returncode == 1
    assert got.stderr.strip().splitlines() == ["memgate: the row counts differ in memories: the target is not a complete copy"]
    assert "memories" in got.stdout and "| NO" in got.stdout
