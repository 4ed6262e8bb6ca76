"""The vector cache's int8 scan with a float32 re-rank, and its files beside the database.

- The int8 scan re-ranked in float32 returns the exact scan's top rows (random and clustered
  E5-sized vectors).
- The files: mode 0600 in a 0700 folder; a restart maps them and reads only the rows changed
  since; rows written, retired, rewritten or forgotten while the gateway was down are seen; a
  forgotten memory is never returned and its vector is zeroed in the file; a file of another
  space, another database or another model is never used.
"""

from __future__ import annotations

import math
import shutil
import stat
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.forget import forget
from memory.store.connection import Store
from memory.store.rows import NewMemory, insert_memories
from memory.store.vector_files import load
from memory.store import vector_space
from memory.store.vector_space import SpaceVectors, quantize
from memory.ingest.raw import RawMessage, store_raw
from memory.store.vectors import VectorCache, _Scored, cache_for, vector_candidates

DIM = 384
NOW = datetime(2026, 3, 1, 12, 0)


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def clustered(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    """Like E5 vectors: a shared direction plus a few topics, cosines packed in a narrow band."""
    common = unit(rng, 1, dim)[0]
    topics = unit(rng, 8, dim)
    v = common + 0.6 * topics[rng.integers(0, 8, n)] + 0.25 * rng.normal(size=(n, dim)).astype(np.float32) / math.sqrt(dim) * 8
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def add(store: Store, rng: np.random.Generator, space: str, n: int, kind: str = "fact") -> list[str]:
    rows = [NewMemory(space_id=space, kind=kind, text=f"note {space} {i}", title=f"note {i}",
                      created_at=NOW - timedelta(days=i)) for i in range(n)]
    return store.write(lambda c: insert_memories(c, rows, clustered(rng, n)))


def exact(store: Store, q: np.ndarray, spaces: list[str], n: int) -> list[str]:
    return [i for i, _ in store.read(lambda c: vector_candidates(c, q, spaces, n))]


def cached(store: Store, cache: VectorCache, q: np.ndarray, spaces: list[str], n: int) -> list[str]:
    return [i for i, _ in store.read(lambda c: cache.candidates(c, q, spaces, n))]


# --- the int8 scan ---------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), m=st.integers(1, 80),
       shape=st.sampled_from(["random", "clustered"]), dead=st.floats(0, 0.5))
def test_int8_scan_with_exact_rerank_returns_the_exact_top_rows(seed, n, m, shape, dead):
    rng = np.random.default_rng(seed)
    vecs = (unit if shape == "random" else clustered)(rng, n)
    sp = SpaceVectors(DIM)
    sp.upsert([f"r{i}" for i in range(n)], np.ones(n, dtype=np.int8), np.arange(n), vecs)
    gone = [f"r{i}" for i in np.flatnonzero(rng.random(n) < dead)]
    sp.drop(gone)
    q = vecs[rng.integers(0, n)] * 0.5 + unit(rng, 1)[0] * 0.5
    q = (q / np.linalg.norm(q)).astype(np.float32)
    (codes,), (qscale,) = quantize(q[None, :])
    alive = np.array([f"r{i}" not in set(gone) for i in range(n)])
    truth = vecs @ q
    order = sorted(np.flatnonzero(alive), key=lambda i: (-truth[i], f"r{i}"))[:m]
    small = vector_space.EXACT_MAX
    try:
        for exact_max in (0, small):  # the int8 scan with its re-rank, then (small spaces) float32 at once
            vector_space.EXACT_MAX = exact_max
            sims = sp.exact(q, None) if sp.small else sp.approx(codes, float(qscale), None)
            got = _Scored(q, [(sp, sims, int(np.isfinite(sims).sum()))]).top(m)
            assert [i for i, _, _, _ in got] == [f"r{i}" for i in order]
            assert all(abs(s - truth[int(i[1:])]) < 1e-5 for i, s, _, _ in got)
    finally:
        vector_space.EXACT_MAX = small


# --- files -----------------------------------------------------------------------------------
@pytest.fixture
def db(tmp_path):
    return tmp_path / "data" / "memory.duckdb"


def test_files_are_private_and_a_restart_maps_them(db):
    rng = np.random.default_rng(1)
    with Store(db, DIM) as store:
        add(store, rng, "A", 300)
        cache = VectorCache(store, persist_min_rows=0)
        q = unit(rng, 1)[0]
        before = cached(store, cache, q, ["A"], 10)
        assert before == exact(store, q, ["A"], 10)
        files = list(cache.folder.glob("*.vec"))
        assert len(files) == 1
        assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
        assert stat.S_IMODE(cache.folder.stat().st_mode) == 0o700
        cache.close()
    with Store(db, DIM) as store:
        cache = VectorCache(store, persist_min_rows=0)
        assert cached(store, cache, q, ["A"], 10) == before
        held = cache._spaces["A"]
        assert isinstance(held.base, np.memmap) and held.nbase == 300  # mapped, not read from the table


def test_changes_made_while_down_are_seen_and_forgotten_rows_leave_the_file(db):
    rng = np.random.default_rng(2)
    with Store(db, DIM) as store:
        ids = add(store, rng, "A", 200)
        q = store.read(lambda c: c.execute("SELECT embedding FROM memories WHERE id = ?", [ids[7]]).fetchone()[0])
        q = np.asarray(q, dtype=np.float32)
        cache = VectorCache(store, persist_min_rows=0)
        assert ids[7] in cached(store, cache, q, ["A"], 5)
        cache.close()
    # The gateway is down; the operator's CLI forgets one memory, ingest adds and retires others.
    with Store(db, DIM) as store:
        store.write(lambda c: forget(c, [ids[7]], ["A"], NOW))
        new = add(store, rng, "A", 20)
        store.write(lambda c: c.execute("UPDATE memories SET status = 'retired' WHERE id IN (SELECT unnest(?))", [ids[10:15]]))
    with Store(db, DIM) as store:
        cache = VectorCache(store, persist_min_rows=0)
        for n in (5, 50, 400):
            got = cached(store, cache, q, ["A"], n)
            assert got == exact(store, q, ["A"], n)
            assert ids[7] not in got and not set(ids[10:15]) & set(got)
        assert set(new) <= set(cached(store, cache, q, ["A"], 400))
        cache.close()
        path = next(cache.folder.glob("*.vec"))
        sp = load(path, DIM)
        p = sp.ids.index(ids[7])
        assert not sp.alive[p] and not np.asarray(sp.base[p]).any() and not sp.codes[p].any()


def test_a_forget_while_running_is_never_returned(db):
    rng = np.random.default_rng(3)
    with Store(db, DIM) as store:
        ids = add(store, rng, "A", 100)
        cache = VectorCache(store, persist_min_rows=0)
        vec = store.read(lambda c: c.execute("SELECT embedding FROM memories WHERE id = ?", [ids[3]]).fetchone()[0])
        q = np.asarray(vec, dtype=np.float32)
        assert cached(store, cache, q, ["A"], 1) == [ids[3]]
        store.write(lambda c: forget(c, [ids[3]], ["A"], NOW))
        assert ids[3] not in cached(store, cache, q, ["A"], 100)
        assert cached(store, cache, q, ["A"], 10) == exact(store, q, ["A"], 10)


def test_a_file_never_serves_another_space(db):
    rng = np.random.default_rng(4)
    with Store(db, DIM) as store:
        add(store, rng, "A", 120)
        b = add(store, rng, "B", 80)
        cache = VectorCache(store, persist_min_rows=0)
        q = unit(rng, 1)[0]
        cached(store, cache, q, ["A"], 5)
        cached(store, cache, q, ["B"], 5)
        cache.close()
        a_file, b_file = cache._file("A"), cache._file("B")
    shutil.copy(b_file, a_file)  # A's file now holds B's rows
    with Store(db, DIM) as store:
        cache = VectorCache(store, persist_min_rows=0)
        got = cached(store, cache, q, ["A"], 50)
        assert got == exact(store, q, ["A"], 50) and not set(got) & set(b)


def test_a_file_of_another_database_or_model_is_not_used(db, tmp_path):
    rng = np.random.default_rng(5)
    other = tmp_path / "other" / "memory.duckdb"
    with Store(other, DIM) as store:
        add(store, rng, "A", 50)
        cache = VectorCache(store, persist_min_rows=0)
        cached(store, cache, unit(rng, 1)[0], ["A"], 5)
        cache.close()
        foreign = cache.folder
    with Store(db, DIM) as store:
        mine = add(store, rng, "A", 60)
        folder = db.with_name(db.name + ".vectors")
        shutil.copytree(foreign, folder)  # a copied folder: same space name, other rows
        cache = VectorCache(store, persist_min_rows=0)
        q = unit(rng, 1)[0]
        got = cached(store, cache, q, ["A"], 60)
        assert set(got) == set(mine) and got == exact(store, q, ["A"], 60)
        store.write(lambda c: Store.meta_set(c, "embedding_model", "another-model"))
        assert cached(store, cache, q, ["A"], 10) == exact(store, q, ["A"], 10)
        cache.close()
        for f in folder.glob("*.vec"):
            assert load(f, DIM) is not None
    with Store(db, DIM) as store:
        store.write(lambda c: Store.meta_set(c, "embedding_model", "a-third-model"))
        cache = VectorCache(store, persist_min_rows=0)
        assert cached(store, cache, q, ["A"], 10) == exact(store, q, ["A"], 10)
        assert cache._spaces["A"].nbase == 60  # rebuilt from the table, not the old model's file


def test_small_spaces_get_no_file(db):
    rng = np.random.default_rng(7)
    with Store(db, DIM) as store:
        add(store, rng, "A", 30)
        cache = VectorCache(store, persist_min_rows=100)
        q = unit(rng, 1)[0]
        assert cached(store, cache, q, ["A"], 5) == exact(store, q, ["A"], 5)
        assert not cache._file("A").exists()


def test_many_rows_written_since_the_file_rewrite_it(db):
    rng = np.random.default_rng(6)
    with Store(db, DIM) as store:
        add(store, rng, "A", 100)
        cache = VectorCache(store, persist_min_rows=0)
        q = unit(rng, 1)[0]
        cached(store, cache, q, ["A"], 5)
        for _ in range(3):
            add(store, rng, "A", 500)
            assert cached(store, cache, q, ["A"], 20) == exact(store, q, ["A"], 20)
        sp = cache._spaces["A"]
        assert sp.nbase > 100 and sp.size == 1600


# --- files built in the background (issue 33) ------------------------------------------------
def test_a_large_space_without_a_file_is_searched_in_sql_while_its_file_is_built(db):
    """Found: the very first search of a 10k space read every vector from the table (0.4-0.5 s,
    3 s at 100k). Now it is answered by the SQL scan, the file is built in the background, and
    the next search (or the first after a restart) maps it."""
    rng = np.random.default_rng(8)
    with Store(db, DIM) as store:
        add(store, rng, "A", 300)
        cache = VectorCache(store, persist_min_rows=0, cold_min_rows=200)
        q = unit(rng, 1)[0]
        assert cached(store, cache, q, ["A"], 10) == exact(store, q, ["A"], 10)
        assert "A" not in cache._spaces                      # not read from the table on the question
        assert cache.settled(120)
        assert cache._file("A").exists()
        fresh = add(store, rng, "A", 5)                       # written after the file: read by seq
        assert cached(store, cache, q, ["A"], 400) == exact(store, q, ["A"], 400)
        held = cache._spaces["A"]
        assert isinstance(held.base, np.memmap) and held.nbase == 300 and held.size == 305
        assert set(fresh) <= set(held.ids)
        cache.close()
    with Store(db, DIM) as store:
        cache = VectorCache(store, persist_min_rows=0, cold_min_rows=200)
        assert cached(store, cache, q, ["A"], 10) == exact(store, q, ["A"], 10)
        assert isinstance(cache._spaces["A"].base, np.memmap)  # a restart maps the file


def test_a_writer_of_many_rows_has_the_file_built_before_the_first_question(db):
    rng = np.random.default_rng(9)
    with Store(db, DIM) as store:
        cache = VectorCache(store, persist_min_rows=100)
        add(store, rng, "A", 250)
        add(store, rng, "B", 20)
        cache.warm(["A", "B"])
        assert cache.settled(120)
        assert cache._file("A").exists() and not cache._file("B").exists()  # too small for a file
        q = unit(rng, 1)[0]
        assert cached(store, cache, q, ["A", "B"], 10) == exact(store, q, ["A", "B"], 10)
        assert isinstance(cache._spaces["A"].base, np.memmap)


def test_a_space_written_after_a_restart_has_its_file_built_before_its_first_question(db, embedder):
    """Found (issue 33): a space that grew without a file (its turns ingested, never questioned
    in that process) read every vector from the table at its first question (0.5 s at 10k rows,
    or the SQL scan while a build competed with it). Now the first turn written to a space asks
    for its file in the background, and the first question maps it."""
    rng = np.random.default_rng(12)
    with Store(db, DIM) as store:
        add(store, rng, "A", 250)
        add(store, rng, "B", 20)
    with Store(db, DIM) as store:
        cache = cache_for(store)
        cache.persist_min_rows = cache._warmer.min_rows = 100
        for space in ("A", "B"):
            store_raw(store, embedder, [RawMessage(space_id=space, role="user", text=f"the piano lesson of {space} moved",
                                                   created_at=NOW, speaker="user", session_id="s1", turn_id="t1")])
        assert cache.settled(120)
        assert cache._file("A").exists() and not cache._file("B").exists()  # B is too small for a file
        assert "A" not in cache._spaces                                      # built, not read on a question
        q = unit(rng, 1)[0]
        assert cached(store, cache, q, ["A", "B"], 10) == exact(store, q, ["A", "B"], 10)
        assert isinstance(cache._spaces["A"].base, np.memmap) and cache._spaces["A"].size == 251


def test_a_file_built_from_rows_read_before_a_forget_is_not_kept(db):
    rng = np.random.default_rng(10)
    with Store(db, DIM) as store:
        ids = add(store, rng, "A", 150)
        cache = VectorCache(store, persist_min_rows=100)
        warmer = cache._warmer
        asked = warmer._gen("A")                            # the build reads the rows as they were here...
        store.write(lambda c: forget(c, [ids[0]], ["A"], NOW))
        cache.refile(["A"])                                 # ...and the forget's refile comes before it ends
        warmer._build("A", asked)
        assert not cache._file("A").exists()
        assert not list(cache.folder.glob("*.staged")) if cache.folder.exists() else True
        cache.warm(["A"])                                   # asked again: built from the rows as they are now
        assert cache.settled(120)
        sp = load(cache._file("A"), DIM)
        assert ids[0] not in sp.ids and len(sp.ids) == 149


async def test_an_import_has_the_file_of_its_space_built_before_the_first_question(db, embedder):
    """A writer of many rows at once (an import) asks for the space's file: it is there before
    the space's first question, so that question maps it instead of reading the table."""
    from memory.engine import MemoryEngine
    from memory.store.vectors import cache_for

    with Store(db, embedder.dim) as store:
        cache = cache_for(store)
        cache.persist_min_rows = cache._warmer.min_rows = 5   # a small import counts as a big one here
        engine = MemoryEngine(store, embedder, None)
        rows = [{"kind": "fact", "space_id": "u:a", "text": f"the orchard's row {i} has young pear trees",
                 "created_at": NOW.isoformat()} for i in range(8)]
        report = engine.import_rows(rows, space_id="u:b")
        assert report.added == 8
        assert cache.settled(120)
        assert cache._file("u:b").exists() and not cache._file("u:a").exists()
        cache.close()


def test_closing_the_store_waits_for_the_build_in_hand_and_starts_no_other(db):
    """`memgate memory import` asked for its space's file and exited while the build read the
    store: the process aborted (exit -6, "terminate called without an active exception")."""
    rng = np.random.default_rng(11)
    store = Store(db, DIM)
    add(store, rng, "A", 3000)
    cache = VectorCache(store, persist_min_rows=100)
    warmer = cache._warmer
    cache.warm(["A"])
    thread = warmer._thread
    store.close()
    assert thread is not None and not thread.is_alive()     # finished or never past its start
    cache.warm(["A"])                                       # after close: nothing starts
    assert warmer._thread is thread
