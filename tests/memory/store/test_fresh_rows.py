"""The fresh rows keyword search holds per store (memory/store/fresh_rows.py) stay exact: after
every write, retire, delete, text change and index rebuild, a search through the held state
ranks, scores and counts as one that reads the fresh rows from nothing; rows without a token
count for nothing; two stores never mix."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.store.connection import Store
from memory.store.keywords import fresh_rows_of, keyword_search, rebuild_index
from memory.store.postings_cache import PostingsCache
from memory.store.rows import NewMemory, bump_seq, insert_memories

DIM = 8
NOW = datetime(2026, 3, 1, 12, 0)
SPACES = ["A", "B", "C"]
WORDS = "run running runs piano pianos berlin flight doctor coffee river".split()
OPS = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(SPACES), st.sampled_from(["chunk", "fact"]),
              st.lists(st.sampled_from([*WORDS, "!!"]), min_size=1, max_size=5).map(" ".join)),
    st.tuples(st.sampled_from(["retire", "revive", "delete", "rewrite", "rebuild"]), st.integers(0, 10**6)),
)


def add(store: Store, space: str, kind: str, text: str) -> str:
    row = NewMemory(space_id=space, kind=kind, text=text, title=text, created_at=NOW - timedelta(minutes=1))
    return store.write(lambda c: insert_memories(c, [row], np.ones((1, DIM), dtype=np.float32)))[0]


def search(store: Store, cache: PostingsCache, terms, spaces, kinds):
    stats: dict = {}
    got = store.read(lambda c: keyword_search(c, terms, spaces, 50, kinds, cache=cache, stats_out=stats)[0])
    return got, stats


def assert_same(held, scratch):
    (got, stats), (want, want_stats) = held, scratch
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(math.isclose(a, b, rel_tol=1e-12) for (_, a), (_, b) in zip(got, want))
    assert stats["df"] == want_stats["df"]
    assert math.isclose(stats["avgdl"], want_stats["avgdl"], rel_tol=1e-12)


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(OPS, min_size=1, max_size=30),
       terms=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=3),
       allowed=st.sets(st.sampled_from(SPACES), min_size=1, max_size=3),
       kinds=st.sampled_from([None, ["fact"], ["chunk"]]))
def test_held_fresh_rows_search_as_rows_read_from_nothing(ops, terms, allowed, kinds):
    spaces = sorted(allowed)
    with Store(":memory:", DIM) as store:
        held = PostingsCache()   # kept through every change, as a gateway keeps it
        ids: list[str] = []
        for op in ops:
            if op[0] == "add":
                ids.append(add(store, *op[1:]))
            elif op[0] == "rebuild":
                rebuild_index(store)
            elif ids:
                pick = ids[op[1] % len(ids)]
                if op[0] in ("retire", "revive"):
                    status = "retired" if op[0] == "retire" else "active"
                    store.write(lambda c: c.execute("UPDATE memories SET status = ? WHERE id = ?", [status, pick]))
                elif op[0] == "delete":
                    store.write(lambda c: c.execute("DELETE FROM memories WHERE id = ?", [pick]))
                    ids.remove(pick)
                else:  # a text change is a new version: a new seq
                    text = " ".join(WORDS[(op[1] + k) % len(WORDS)] for k in range(3))
                    store.write(lambda c: c.execute("UPDATE memories SET search_text = ? WHERE id = ?", [text, pick]))
                    store.write(lambda c: bump_seq(c, [pick]))
            assert_same(search(store, held, terms, spaces, kinds), search(store, PostingsCache(), terms, spaces, kinds))


def test_rows_without_a_token_count_for_nothing_and_stores_never_mix():
    with Store(":memory:", DIM) as one, Store(":memory:", DIM) as two:
        c1, c2 = PostingsCache(), PostingsCache()
        piano = add(one, "A", "fact", "piano lessons")
        add(one, "A", "fact", "!! ??")                    # no token: not in N, not in avgdl
        add(two, "A", "fact", "piano piano piano river")
        got, stats = search(one, c1, ["piano"], ["A"], None)
        assert [i for i, _ in got] == [piano]
        # search_text holds the title and the text: "piano lessons piano lessons"
        assert stats["df"] == {"piano": 1} and stats["avgdl"] == 4.0
        held = fresh_rows_of(c1)
        assert (held.n, held.total_len) == (1, 4)
        got2, stats2 = search(two, c2, ["piano"], ["A"], None)
        assert piano not in {i for i, _ in got2} and stats2["avgdl"] == 8.0
        assert search(one, c1, ["piano"], ["A"], None) == (got, stats)  # unchanged by the other store
