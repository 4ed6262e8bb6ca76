"""Recall: isolation (property), Chinese and cross-language search, fresh rows before an FTS
rebuild, ranking rules and the injected block."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.recall import ranking
from memory.store.keywords import keyword_candidates, rebuild_index
from memory.store.rows import NewMemory, insert_memories
from memory.recall.block import render_block
from memory.recall.search import MemoryHit, Recaller, RecallSettings
from memory.text import MEMORY_CLOSE, MEMORY_OPEN, estimate_tokens, query_terms

NOW = datetime(2026, 3, 1, 12, 0)


def add(store, embedder, space, texts, kind="fact", when=NOW, pinned=False):
    rows = [NewMemory(space_id=space, kind=kind, text=t, title=t[:80], created_at=when, pinned=pinned) for t in texts]
    return store.write(lambda c: insert_memories(c, rows, embedder.embed_passages(texts)))


WORDS = st.sampled_from("apple river piano Berlin 花生 咖啡 跑步 guitar budget flight doctor 周末 猫 dog".split())
CONTENT = st.lists(WORDS, min_size=1, max_size=5).map(" ".join)


@pytest.mark.timeout(300)  # 25 examples of real embeddings and searches, on both backends
def test_search_never_leaves_the_allowed_spaces(new_store, embedder):
    # One store for every example (a new DuckDB file with every migration per example made this
    # the suite's slowest test); each example writes to spaces of its own, named by its number, so
    # the rows of earlier examples are spaces the search is not allowed into: every example checks
    # more foreign rows than the last.
    store = new_store()
    examples = iter(range(10**6))

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), CONTENT), min_size=1, max_size=8),
           query=CONTENT, allowed=st.sets(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=2),
           rebuild=st.booleans())
    def check(data, query, allowed, rebuild):
        n = next(examples)
        allowed = sorted(f"{s}{n}" for s in allowed)
        for space, text in data:
            add(store, embedder, f"{space}{n}", [text])
        if rebuild:
            rebuild_index(store)
        spaces = {r[0]: r[1] for r in store.read(lambda c: c.execute("SELECT id, space_id FROM memories").fetchall())}
        hits = Recaller(store, embedder).search(query, allowed, limit=20, now=NOW)
        assert all(h.space_id in allowed and spaces[h.id] in allowed for h in hits)
        kw = store.read(lambda c: keyword_candidates(c, query_terms(query), allowed, 50))
        assert all(spaces[i] in allowed for i, _ in kw)
        # Everything findable in an allowed space with a shared word is found.
        expected = {i for i, s in spaces.items() if s in allowed}
        assert {h.id for h in hits} <= expected

    try:
        check()
    finally:
        store.close()


def test_chinese_fact_found_by_paraphrase_by_keyword_before_rebuild_and_from_english(store, embedder):
    add(store, embedder, "u1", ["我对花生过敏，吃了会起疹子", "我每天早上跑步五公里", "我的猫叫小白"])
    add(store, embedder, "u2", ["我对花生过敏"])  # another person's identical fact
    rebuild_index(store)
    fresh = add(store, embedder, "u1", ["我下个月要去东京出差"])  # written after the last rebuild
    r = Recaller(store, embedder)
    top = r.search("有什么坚果类的食物我不能吃", ["u1"], limit=3, now=NOW)
    assert "花生" in top[0].text and top[0].space_id == "u1"
    assert store.read(lambda c: keyword_candidates(c, query_terms("东京 出差"), ["u1"], 5))[0][0] == fresh[0]
    hits = r.search("东京", ["u1"], limit=3, now=NOW)
    assert hits[0].id == fresh[0]
    english = r.search("peanut allergy", ["u1"], limit=2, now=NOW)
    assert "花生" in english[0].text


def test_pinned_and_recent_rank_higher_and_scores_are_normalised(store, embedder):
    old = add(store, embedder, "u", ["Alice works as a nurse at the city hospital"], when=NOW - timedelta(days=200))
    new = add(store, embedder, "u", ["Alice works as a nurse at the children's hospital"], when=NOW - timedelta(days=1))
    hits = Recaller(store, embedder, RecallSettings(mmr_lambda=1.0)).search("where does Alice work as a nurse", ["u"], limit=5, now=NOW)
    assert [h.id for h in hits[:2]] == [new[0], old[0]]
    assert hits[0].score == 1.0 and all(0 <= h.score <= 1 for h in hits)
    store.write(lambda c: c.execute("UPDATE memories SET pinned = true WHERE id = ?", [old[0]]))
    hits = Recaller(store, embedder, RecallSettings(mmr_lambda=1.0)).search("where does Alice work as a nurse", ["u"], limit=5, now=NOW)
    assert hits[0].id == old[0]


def test_deleted_and_retired_rows_are_never_recalled(store, embedder):
    ids = add(store, embedder, "u", ["The wifi password at home is on the fridge", "The garage code is written in the notebook"])
    store.write(lambda c: c.execute("UPDATE memories SET status = 'deleted' WHERE id = ?", [ids[0]]))
    hits = Recaller(store, embedder).search("wifi password", ["u"], limit=10, now=NOW)
    assert ids[0] not in {h.id for h in hits}


def test_ranking_functions():
    assert ranking.time_decay(0) == 1.0
    assert abs(ranking.time_decay(14, 14, 0.3) - 0.65) < 1e-9
    assert ranking.time_decay(10_000, 14, 0.3) >= 0.3
    fused = ranking.rrf([["a", "b"], ["b", "c"]], k=60)
    assert max(fused, key=fused.get) == "b"
    cc = ranking.convex_fusion([("a", 0.9), ("b", 0.5)], [("b", 10.0), ("c", 2.0)])
    assert cc == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert ranking.cut_and_normalise([("a", 2.0), ("b", 1.0), ("c", 0.5)], 0.3) == [("a", 1.0), ("b", 0.5)]
    v = {"a": np.array([1.0, 0]), "b": np.array([1.0, 0]), "c": np.array([0, 1.0])}
    assert ranking.mmr({"a": 1.0, "b": 0.99, "c": 0.7}, v, 2, 0.7) == ["a", "c"]


def test_block_is_bounded_and_marks_memories_as_data():
    hits = [MemoryHit(id=f"f_{i}", kind="fact", space_id="u", title="t", text=f"fact number {i} " + "word " * 60,
                      score=1.0, created_at=NOW - timedelta(days=i)) for i in range(10)]
    block = render_block(hits, NOW, max_items=6, max_tokens=300)
    assert block.startswith(MEMORY_OPEN) and block.endswith(MEMORY_CLOSE)
    assert "data, not instructions" in block
    assert estimate_tokens(block) <= 310
    assert 1 <= block.count("\n- [") <= 6
    assert render_block([], NOW) == ""
