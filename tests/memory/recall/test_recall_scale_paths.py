"""The fast recall paths return what the exact ones do.

- The in-memory vector cache gives the same top rows as the SQL scan, after inserts, retires,
  deletes, text changes and a model change, and never a row outside the allowed spaces.
- Keyword search over the postings table gives BM25 as specified (an independent Python
  oracle), for rows indexed, written since the rebuild, rewritten, retired or deleted.
- Recall through the cache equals recall through SQL only.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.store.keywords import drop_postings, keyword_candidates, keyword_search, rebuild_index, sql_strings
from memory.store.postings_cache import PostingsCache
from memory.store.rows import NewMemory, bump_seq, insert_memories
from memory.recall.search import Recaller, RecallSettings
from memory.store.connection import Store, vector_literal
from memory.store.vectors import VectorCache, cache_for, fetch_vectors, vector_candidates

DIM = 16
NOW = datetime(2026, 3, 1, 12, 0)
SPACES = ["A", "B", "C"]
KINDS = ["chunk", "fact"]
HYP = settings(max_examples=20, deadline=None)


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def add(store: Store, rng: np.random.Generator, space: str, n: int, kind: str = "fact",
        texts: list[str] | None = None) -> list[str]:
    texts = texts or [f"note {space} {i}" for i in range(n)]
    rows = [NewMemory(space_id=space, kind=kind, text=t, title=t, created_at=NOW - timedelta(days=i)) for i, t in enumerate(texts)]
    return store.write(lambda c: insert_memories(c, rows, unit(rng, len(rows))))


def set_status(store: Store, ids: list[str], status: str) -> None:
    if ids:
        store.write(lambda c: c.execute("UPDATE memories SET status = ? WHERE id IN (SELECT unnest(?))", [status, ids]))


def delete(store: Store, ids: list[str]) -> None:
    if ids:
        store.write(lambda c: c.execute("DELETE FROM memories WHERE id IN (SELECT unnest(?))", [ids]))


def rewrite(store: Store, rng: np.random.Generator, ids: list[str], text: str | None = None) -> None:
    """A text change as the engine does it: new vector (and text), and a new seq."""
    for i in ids:
        vec = vector_literal(unit(rng, 1)[0])
        sql = f"UPDATE memories SET embedding = ?::VARCHAR::FLOAT[{DIM}]" + (", search_text = ?" if text else "") + " WHERE id = ?"
        store.write(lambda c, i=i, vec=vec: c.execute(sql, [vec, text, i] if text else [vec, i]))
    store.write(lambda c: bump_seq(c, ids))


def proposed_then_settled(con, cache: VectorCache, q: np.ndarray, spaces: list[str], n: int, kinds=None):
    """What recall does: propose, check the unchecked rows in SQL, settle."""
    prop = cache.propose(con, q, spaces, n, kinds)
    rows = con.execute(f"SELECT id, space_id, kind, status FROM memories WHERE id IN ({sql_strings(prop.unchecked) or ''})"
                       ).fetchall() if prop.unchecked else []
    live = {i for i, s, k, st in rows if st == "active" and s in spaces and (not kinds or k in kinds)}
    return cache.settle(con, prop, live, q, spaces, n, kinds)[0]


def both(store: Store, cache: VectorCache, q: np.ndarray, spaces: list[str], n: int, kinds=None):
    """The cache's answer (both ways) and the SQL path's; asserts the two cache ways agree."""
    def run(con):
        settled = proposed_then_settled(con, cache, q, spaces, n, kinds)
        got, want = cache.candidates(con, q, spaces, n, kinds), vector_candidates(con, q, spaces, n, kinds)
        assert_same(settled, want)
        return got, want
    return store.read(run)


def assert_same(got, want):
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(math.isclose(a, b, abs_tol=1e-5) for (_, a), (_, b) in zip(got, want))


@pytest.fixture
def mem_store():
    s = Store(":memory:", DIM)
    yield s
    s.close()


# --- vectors ---------------------------------------------------------------------------------
@HYP
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(0, 60), min_size=3, max_size=3),
       allowed=st.sets(st.sampled_from(SPACES), min_size=1, max_size=3), n=st.integers(1, 40),
       kinds=st.sampled_from([None, ["fact"], ["chunk"], ["fact", "chunk"]]),
       changes=st.lists(st.sampled_from(["insert", "retire", "delete", "rewrite"]), max_size=6))
def test_vector_cache_returns_the_sql_top_rows(seed, sizes, allowed, n, kinds, changes):
    with Store(":memory:", DIM) as mem_store:
        _vector_case(mem_store, seed, sizes, allowed, n, kinds, changes)


def _vector_case(mem_store, seed, sizes, allowed, n, kinds, changes):
    rng = np.random.default_rng(seed)
    ids: list[str] = []
    for space, size in zip(SPACES, sizes):
        ids += add(mem_store, rng, space, size, kind=KINDS[size % 2])
    cache = VectorCache(mem_store)
    q = unit(rng, 1)[0]
    spaces = sorted(allowed)
    assert_same(*both(mem_store, cache, q, spaces, n, kinds))
    for change in changes:  # the cache was loaded; the table moves on without telling it
        live = [i for i in ids if i]
        pick = list(rng.choice(live, size=min(len(live), 3), replace=False)) if live else []
        if change == "insert":
            ids += add(mem_store, rng, str(rng.choice(SPACES)), 5, kind=str(rng.choice(KINDS)))
        elif change == "retire":
            set_status(mem_store, pick, "retired")
        elif change == "delete":
            delete(mem_store, pick)
            ids = [i for i in ids if i not in pick]
        else:
            rewrite(mem_store, rng, pick)
        got, want = both(mem_store, cache, q, spaces, n, kinds)
        assert_same(got, want)
        owners = dict(mem_store.read(lambda c: c.execute("SELECT id, space_id FROM memories").fetchall()))
        assert all(owners[i] in allowed for i, _ in got)


def test_rows_retired_behind_the_cache_are_skipped_and_the_slice_widens(mem_store):
    rng = np.random.default_rng(1)
    add(mem_store, rng, "A", 300)
    cache = VectorCache(mem_store)
    q = unit(rng, 1)[0]
    first, _ = both(mem_store, cache, q, ["A"], 10)
    # Retire the 150 nearest rows: far more than the first slice (2n + 20) holds.
    nearest = [i for i, _ in mem_store.read(lambda c: vector_candidates(c, q, ["A"], 150))]
    set_status(mem_store, nearest, "retired")
    got, want = both(mem_store, cache, q, ["A"], 10)
    assert_same(got, want)
    assert not {i for i, _ in got} & set(nearest) and {i for i, _ in first} <= set(nearest)


def test_a_model_change_empties_the_cache(mem_store):
    rng = np.random.default_rng(2)
    ids = add(mem_store, rng, "A", 50)
    cache = VectorCache(mem_store)
    q = unit(rng, 1)[0]
    both(mem_store, cache, q, ["A"], 5)
    # reembed rewrites every vector without a new seq, then records the model.
    new = unit(rng, len(ids))
    mem_store.write(lambda c: c.execute(
        f"UPDATE memories SET embedding = v.vec FROM (SELECT unnest(?) AS id, unnest(?::VARCHAR::FLOAT[{DIM}][]) AS vec) v "
        "WHERE memories.id = v.id", [ids, "[" + ",".join(vector_literal(r) for r in new) + "]"]))
    mem_store.write(lambda c: Store.meta_set(c, "embedding_model", "another-model"))
    assert_same(*both(mem_store, cache, q, ["A"], 5))


def test_small_spaces_can_stay_in_sql_and_results_merge(mem_store):
    rng = np.random.default_rng(3)
    add(mem_store, rng, "big", 80)
    add(mem_store, rng, "small", 5)
    cache = VectorCache(mem_store, min_rows=50)
    q = unit(rng, 1)[0]
    assert_same(*both(mem_store, cache, q, ["big", "small"], 30))
    assert cache.vectors([i for i, _ in both(mem_store, cache, q, ["big"], 3)[0]])


def test_fetch_vectors_returns_the_stored_vectors(mem_store):
    rng = np.random.default_rng(4)
    ids = add(mem_store, rng, "A", 3)
    got = mem_store.read(lambda c: fetch_vectors(c, ids + ["missing'); DROP TABLE memories; --"]))
    assert set(got) == set(ids)
    assert mem_store.read(lambda c: c.execute("SELECT count(*) FROM memories").fetchone()[0]) == 3


# --- keywords --------------------------------------------------------------------------------
WORDS = "run running runs piano pianos berlin flight flights doctor budget coffee river".split()


def oracle(store: Store, snapshot: dict[str, list[str]], wm: int, terms: list[str], spaces: list[str],
           limit: int, kinds=None) -> list[tuple[str, float]]:
    """BM25 as fts.py specifies it, computed in Python from the table and the rebuild snapshot."""
    def stem_all(con, toks):
        toks = sorted(set(toks))
        return dict(con.execute("SELECT t, stem(strip_accents(lower(t)), 'porter') FROM (SELECT unnest(?) AS t)", [toks]).fetchall()) if toks else {}

    rows = store.read(lambda c: c.execute("SELECT id, space_id, kind, status, seq, search_text FROM memories").fetchall())
    raw = {r[0]: [t for t in r[5].lower().split(" ") if t] for r in rows}
    stems = store.read(lambda c: stem_all(c, [t for ts in raw.values() for t in ts] + list(terms)))
    q = list(dict.fromkeys(stems[t] for t in terms))
    fresh = {r[0]: [stems[t] for t in raw[r[0]]] for r in rows if r[4] > wm and r[3] == "active"}
    fresh = {i: ts for i, ts in fresh.items() if ts}
    n = len(snapshot) + len(fresh)
    avgdl = (sum(len(ts) for ts in snapshot.values()) + sum(len(ts) for ts in fresh.values())) / max(1, n)
    df = {t: sum(t in ts for ts in snapshot.values()) + sum(t in ts for ts in fresh.values()) for t in q}
    out = []
    for i, space, kind, status, seq, _ in rows:
        if status != "active" or space not in spaces or (kinds and kind not in kinds):
            continue
        toks = snapshot.get(i) if seq <= wm else fresh.get(i)
        if not toks:
            continue
        score = 0.0
        for t in q:
            tf = toks.count(t)
            if tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * len(toks) / max(avgdl, 1e-9)))
        if score:
            out.append((i, score, seq))
    out.sort(key=lambda x: (-round(x[1], 9), x[2]))  # ties: the older row version first
    return [(i, sc) for i, sc, _ in out[:limit]]


def snapshot_of(store: Store) -> dict[str, list[str]]:
    rows = store.read(lambda c: c.execute(
        "SELECT id, list(stem(t, 'porter')) FILTER (WHERE t <> '') FROM "
        "(SELECT id, unnest(string_split(strip_accents(lower(search_text)), ' ')) AS t FROM memories) GROUP BY id").fetchall())
    ids = store.read(lambda c: [r[0] for r in c.execute("SELECT id FROM memories").fetchall()])
    got = {i: list(ts or []) for i, ts in rows}
    return {i: got.get(i, []) for i in ids}


@HYP
@given(seed=st.integers(0, 2**32 - 1),
       docs=st.lists(st.tuples(st.sampled_from(SPACES), st.sampled_from(KINDS),
                               st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)), min_size=1, max_size=25),
       rebuild_at=st.integers(0, 25), later=st.lists(st.sampled_from(["retire", "delete", "rewrite"]), max_size=4),
       terms=st.lists(st.sampled_from(WORDS + ["absent"]), min_size=1, max_size=3),
       allowed=st.sets(st.sampled_from(SPACES), min_size=1, max_size=3), limit=st.integers(1, 12),
       kinds=st.sampled_from([None, ["fact"], ["chunk"]]))
def test_keyword_scores_follow_the_bm25_spec(seed, docs, rebuild_at, later, terms, allowed, limit, kinds):
    with Store(":memory:", DIM) as mem_store:
        _keyword_case(mem_store, seed, docs, rebuild_at, later, terms, allowed, limit, kinds)


def _keyword_case(mem_store, seed, docs, rebuild_at, later, terms, allowed, limit, kinds):
    rng = np.random.default_rng(seed)
    ids: list[str] = []
    snapshot: dict[str, list[str]] = {}
    wm = 0
    spaces = sorted(allowed)
    cache = PostingsCache()  # warmed at the rebuild, then kept through every later change
    for k, (space, kind, text) in enumerate(docs):
        if k == rebuild_at:
            wm = rebuild_index(mem_store)
            snapshot = snapshot_of(mem_store)
            mem_store.read(lambda c: keyword_search(c, terms, spaces, limit, kinds, cache=cache))
        ids += add(mem_store, rng, space, 1, kind=kind, texts=[text])
    for change in later:
        pick = [ids[int(rng.integers(len(ids)))]] if ids else []
        if change == "retire":
            set_status(mem_store, pick, "retired")
        elif change == "delete":
            delete(mem_store, pick)
            ids = [i for i in ids if i not in pick]
        else:
            rewrite(mem_store, rng, pick, text=" ".join(rng.choice(WORDS, size=3)))
    got = mem_store.read(lambda c: keyword_candidates(c, terms, spaces, limit, kinds))
    # The postings held in memory score exactly like the SQL path, warm or cold.
    for held in (cache, PostingsCache()):
        from_memory = mem_store.read(lambda c, held=held: keyword_search(c, terms, spaces, limit, kinds, cache=held)[0])
        assert [i for i, _ in from_memory] == [i for i, _ in got]
        assert all(math.isclose(a, b, rel_tol=1e-12) for (_, a), (_, b) in zip(from_memory, got))
    want = oracle(mem_store, snapshot, wm, terms, spaces, limit, kinds)
    assert len(got) == len(want)
    assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for (_, a), (_, b) in zip(got, want))
    scores = dict(oracle(mem_store, snapshot, wm, terms, spaces, 10_000, kinds))
    assert all(i in scores and math.isclose(s, scores[i], rel_tol=1e-9) for i, s in got)


def test_keyword_slice_widens_past_rows_retired_since_the_rebuild(mem_store):
    rng = np.random.default_rng(5)
    best = add(mem_store, rng, "A", 60, texts=["piano piano piano"] * 60)
    add(mem_store, rng, "A", 5, texts=[f"piano lesson {i} with a long tail of words" for i in range(5)])
    wm = rebuild_index(mem_store)
    snapshot = snapshot_of(mem_store)
    set_status(mem_store, best, "retired")  # the index's whole first slice (2 * 5 + 20) is dead
    got = mem_store.read(lambda c: keyword_candidates(c, ["piano"], ["A"], 5))
    assert len(got) == 5 and not {i for i, _ in got} & set(best)
    assert [i for i, _ in got] == [i for i, _ in oracle(mem_store, snapshot, wm, ["piano"], ["A"], 5)]


def test_postings_held_in_memory_follow_a_forget_and_a_rebuild(mem_store):
    """A forget drops postings (the term statistics change) and a rebuild replaces them: the
    cache sees both through the index version and scores as SQL does afterwards."""
    rng = np.random.default_rng(9)
    ids = add(mem_store, rng, "A", 8, texts=[f"piano {'lesson ' * i}" for i in range(8)])
    add(mem_store, rng, "B", 4, texts=["piano concert"] * 4)
    rebuild_index(mem_store)
    cache = PostingsCache()

    def same() -> list[tuple[str, float]]:
        held = mem_store.read(lambda c: keyword_search(c, ["piano", "lesson"], ["A"], 5, cache=cache)[0])
        assert held == mem_store.read(lambda c: keyword_candidates(c, ["piano", "lesson"], ["A"], 5))
        return held

    before = same()
    seqs = [r[0] for r in mem_store.read(lambda c: c.execute(
        "SELECT seq FROM memories WHERE id IN (SELECT unnest(?))", [ids[:3]]).fetchall())]
    mem_store.write(lambda c: drop_postings(c, seqs))
    delete(mem_store, ids[:3])
    after_forget = same()
    assert after_forget != before and not {i for i, _ in after_forget} & set(ids[:3])
    add(mem_store, rng, "A", 3, texts=["lesson lesson piano"] * 3)
    rebuild_index(mem_store)
    assert same() != after_forget


def test_sql_strings_quotes_safely(mem_store):
    evil = "x'); DROP TABLE memories; --"
    assert mem_store.read(lambda c: c.execute(f"SELECT [{sql_strings([evil, 'ok'])}]").fetchone()[0]) == [evil, "ok"]
    assert mem_store.read(lambda c: keyword_candidates(c, [evil], ["A'", "B"], 5)) == []


# --- recall end to end -----------------------------------------------------------------------
class _VecEmbedder:
    """Deterministic vectors from a hash of the text (recall logic, not model quality)."""

    name, dim = "test:hash", DIM

    def embed_passages(self, texts):
        return np.stack([self.embed_query(t) for t in texts])

    def embed_query(self, text):
        # hashlib, not hash(): str hashes change per process, and so did this test's data.
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
        return v / np.linalg.norm(v)


def same_up_to_near_ties(a, b, tol: float = 2e-4) -> bool:
    """The same hits, in an order that differs only between hits scored within `tol`."""
    if {h.id for h in a} != {h.id for h in b}:
        return False
    pos = {h.id: i for i, h in enumerate(b)}
    return all(pos[x.id] < pos[y.id] or abs(x.score - y.score) <= tol for i, x in enumerate(a) for y in a[i + 1:])


def test_recall_through_the_cache_equals_recall_through_sql(mem_store):
    rng = np.random.default_rng(6)
    emb = _VecEmbedder()
    for space in SPACES:
        texts = [" ".join(rng.choice(WORDS, size=4)) for _ in range(40)]
        rows = [NewMemory(space_id=space, kind="fact", text=t, title=t, created_at=NOW - timedelta(days=i)) for i, t in enumerate(texts)]
        mem_store.write(lambda c, rows=rows, texts=texts: insert_memories(c, rows, emb.embed_passages(texts)))
    rebuild_index(mem_store)
    add(mem_store, rng, "A", 10, texts=[f"fresh piano {i}" for i in range(10)])
    fast = Recaller(mem_store, emb, RecallSettings())
    for query, spaces in (("piano flight", ["A"]), ("doctor budget", ["A", "B"]), ("coffee river", ["C"])):
        cache_for(mem_store).min_rows = 0
        a = fast.search(query, spaces, limit=8, now=NOW)
        cache_for(mem_store).min_rows = 10**9
        cache_for(mem_store).clear()
        b = fast.search(query, spaces, limit=8, now=NOW)
        # numpy and DuckDB sum a cosine's float32 products in different orders: the last bits
        # differ, so two near-equal memories may swap; the same memories, the same scores.
        assert [h.id for h in a] == [h.id for h in b] or same_up_to_near_ties(a, b)
        assert all(abs(x.score - y.score) <= 2e-4 for x, y in zip(sorted(a, key=lambda h: h.id), sorted(b, key=lambda h: h.id)))
        assert a and all(h.space_id in spaces for h in a)


def test_rows_held_by_version_follow_pins_retires_forgets_and_erase(mem_store):
    """Recall holds the rows it has read by version (memory/store/row_cache.py) and asks SQL only
    for their status and pin: a pin, a retire and a forget made after a search change the next
    search exactly as they change a search made with nothing held; another space's held rows
    never come back; an erase lets go of the space's rows."""
    from memory.forget import forget
    from memory.store.row_cache import rows_for

    rng = np.random.default_rng(9)
    emb = _VecEmbedder()
    for space in ("A", "B"):
        texts = [" ".join(rng.choice(WORDS, size=4)) for _ in range(60)]
        rows = [NewMemory(space_id=space, kind="chunk", role="user", text=t, title=t, session_id=f"{space}{i // 6}",
                          created_at=NOW - timedelta(hours=i)) for i, t in enumerate(texts)]
        mem_store.write(lambda c, rows=rows, texts=texts: insert_memories(c, rows, emb.embed_passages(texts)))
    rebuild_index(mem_store)
    rec = Recaller(mem_store, emb, RecallSettings())
    queries = ("piano flight", "doctor budget coffee", "river")

    def same_held_or_not(spaces):
        for q in queries:
            held = rec.search(q, spaces, limit=8, now=NOW)
            rows_for.drop(mem_store)
            fresh = rec.search(q, spaces, limit=8, now=NOW)
            assert [(h.id, h.score, h.pinned) for h in held] == [(h.id, h.score, h.pinned) for h in fresh]
            assert held and all(h.space_id in spaces for h in held)
        return fresh

    top = same_held_or_not(["A"])
    assert rows_for(mem_store)._rows
    mem_store.write(lambda c: c.execute("UPDATE memories SET pinned = true WHERE id = ?", [top[-1].id]))
    after_pin = same_held_or_not(["A"])
    assert any(h.pinned for h in after_pin)
    set_status(mem_store, [after_pin[0].id], "retired")
    after_retire = same_held_or_not(["A"])
    assert after_pin[0].id not in {h.id for h in after_retire}
    mem_store.write(lambda c: forget(c, [after_retire[0].id], ["A"], NOW))
    assert after_retire[0].id not in {h.id for h in same_held_or_not(["A"])}
    same_held_or_not(["B"])
    rec.search(queries[0], ["A"], limit=8, now=NOW)
    assert {r[2] for r in rows_for(mem_store)._rows.values()} == {"A", "B"}
    cache_for(mem_store).refile(["A"], drop=True)  # what an erase does after deleting the rows
    assert {r[2] for r in rows_for(mem_store)._rows.values()} == {"B"}
