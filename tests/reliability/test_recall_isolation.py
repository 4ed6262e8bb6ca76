"""Recall's second step in the reliability ledger: the session neighbours it reaches (two turns
on each side since issue 12) never come from another space, even when two spaces use the same
session id and their turns interleave in time. Real DuckDB file, real embedder, real Recaller."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

from memory.embed import Embedder, LocalE5Embedder
from memory.ingest.raw import RawMessage, store_raw
from memory.recall.search import Recaller
from memory.store.connection import Store
from memory.store.keywords import rebuild_index
from tests.reliability.harness import Counts, assert_safe, scenario

NAME = "recall: second step across spaces sharing a session id"
START = datetime(2026, 3, 1, 9, 0)
QUERIES = ("北京饭店的电话是多少？", "我那次对酒店类型有什么要求？", "What is the hotel's phone number?",
           "你推荐的餐馆人均消费多少？", "where did I stay in Beijing?")


def _turns(space: str, secret: str) -> list[RawMessage]:
    lines = [("用户", "帮我找一家舒适型酒店。"), ("助手", "推荐您去北京饭店。"), ("用户", "这家酒店的电话是多少？"),
             ("助手", f"电话是{secret}。"), ("用户", "I stayed at a hotel in Beijing last spring."),
             ("助手", f"The hotel's phone number is {secret}."), ("用户", "推荐一家餐馆，人均消费100元左右。"),
             ("助手", f"推荐{secret}号餐馆，人均消费98元。")]
    # Space v's turns sit 15 s after u's: ordered by time, the two spaces alternate.
    offset = 15 if space == "v" else 0
    return [RawMessage(space_id=space, role="user" if who == "用户" else "assistant", text=text, speaker=who,
                       created_at=START + timedelta(seconds=30 * i + offset), session_id="shared-session",
                       turn_id=f"{space}:{i}") for i, (who, text) in enumerate(lines)]


def run(tmp: Path, embedder: Embedder | None = None) -> Counts:
    store = Store(tmp / "recall.duckdb", 384)
    try:
        embedder = embedder or LocalE5Embedder()
        mine, theirs = _turns("u", "010-1111"), _turns("v", "020-9999")
        stored = len(store_raw(store, embedder, mine, dedup=False)) + len(store_raw(store, embedder, theirs, dedup=False))
        rebuild_index(store)
        recaller = Recaller(store, embedder)
        answered = leaked = 0
        for q in QUERIES:
            hits = recaller.search(q, ["u"], limit=20, now=START + timedelta(days=1))
            answered += bool(hits)
            leaked += sum(h.space_id != "u" or "020-9999" in h.text for h in hits)
        return Counts(NAME, messages_in=len(mine) + len(theirs), answered=answered, stored=stored,
                      lost=len(mine) + len(theirs) - stored, leaked=leaked)
    finally:
        store.close()


@scenario(NAME)
async def second_step_across_spaces(tmp: Path) -> Counts:
    return await asyncio.to_thread(run, tmp)


def test_the_second_step_never_reaches_another_space(tmp_path, embedder):
    counts = run(tmp_path, embedder)
    assert_safe(counts)
    assert counts.answered == len(QUERIES) and counts.stored == counts.messages_in == 16
