"""Retention (issue 35, `[memory] forget_raw_after_days`): raw messages older than the cutoff go
once their facts and task were extracted, the facts stay, and (DuckDB) the words leave the file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from memory.retention import forget_raw
from memory.store.compact import pending_spaces, rewrite
from memory.store.connection import Store
from memory.store.rows import NewMemory, add_sources, ensure_space, insert_memories
from tests.bytescan import find, install_plain_duckdb

NOW = datetime(2026, 3, 1, tzinfo=UTC)
OLD, NEW = NOW - timedelta(days=40), NOW - timedelta(days=2)


def _seed(store, embedder) -> dict[str, str]:
    """Chunks old and new, one still waiting for its facts, one in an open task, and a fact."""
    said = {"old": ("OLDMARKER4471 we planted the tomatoes", OLD, False, None),
            "waiting": ("WAITMARKER1212 facts not yet extracted", OLD, True, None),
            "open": ("OPENMARKER3434 in a task still open", OLD, False, "t_open"),
            "closed": ("CLOSEDMARKER5656 in a finished task", OLD, False, "t_done"),
            "new": ("NEWMARKER7878 said two days ago", NEW, False, None)}

    def write(c) -> dict[str, str]:
        ensure_space(c, "u1", "user", "u1", NOW)
        for tid, status in (("t_open", "open"), ("t_done", "completed")):
            c.execute("INSERT INTO tasks (id, space_id, status, started_at, last_at) VALUES (?, 'u1', ?, ?, ?)",
                      [tid, status, OLD.replace(tzinfo=None), OLD.replace(tzinfo=None)])
        texts = [t for t, *_ in said.values()] + ["FACTMARKER9090 the tomatoes are planted"]
        vecs = embedder.embed_passages(texts)
        ids = {}
        for (name, (text, at, needs, task)), vec in zip(said.items(), vecs):
            [ids[name]] = insert_memories(c, [NewMemory(space_id="u1", kind="chunk", text=text, title=text, role="user",
                                                        created_at=at, turn_id=f"turn_{name}", task_id=task,
                                                        needs_facts=needs)], vec[None])
            c.execute("INSERT INTO ingest_queue (id, space_id, turn_id, payload, status, next_attempt_at, created_at) "
                      "VALUES (?, 'u1', ?, ?, 'done', ?, ?)",
                      [f"q_{name}", f"turn_{name}", json.dumps({"messages": [{"role": "user", "text": text}]}),
                       at.replace(tzinfo=None), at.replace(tzinfo=None)])
        [ids["fact"]] = insert_memories(c, [NewMemory(space_id="u1", kind="fact", text=texts[-1], title=texts[-1],
                                                      created_at=OLD)], vecs[-1:])
        add_sources(c, [ids["fact"]], [ids["old"]])
        return ids

    return store.write(write)


def test_old_raw_messages_go_once_learnt_from_and_the_facts_stay(store, embedder):
    ids = _seed(store, embedder)
    assert store.write(lambda c: forget_raw(c, NOW - timedelta(days=30), NOW)) == 2
    assert store.write(lambda c: forget_raw(c, NOW - timedelta(days=30), NOW)) == 0   # done: nothing more
    status = dict(store.read(lambda c: c.execute("SELECT id, status FROM memories").fetchall()))
    gone = {n for n, i in ids.items() if status[i] == "deleted"}
    assert gone == {"old", "closed"}
    text = dict(store.read(lambda c: c.execute("SELECT id, text FROM memories").fetchall()))
    assert text[ids["old"]] == "" and text[ids["fact"]].startswith("FACTMARKER9090")
    payloads = dict(store.read(lambda c: c.execute("SELECT turn_id, payload FROM ingest_queue").fetchall()))
    assert json.loads(payloads["turn_old"])["messages"] == [] and "NEWMARKER" in payloads["turn_new"]
    sources = store.read(lambda c: c.execute("SELECT chunk_id FROM fact_sources").fetchall())
    assert sources == [(ids["old"],)]     # the fact's provenance resolves to the tombstone


@pytest.mark.duckdb_only("the byte scan reads the DuckDB file")
def test_the_forgotten_words_leave_the_file(tmp_path, embedder):
    undo = install_plain_duckdb()
    try:
        store = Store(tmp_path / "data" / "memgate.duckdb", 384)
        _seed(store, embedder)
        store.write(lambda c: c.execute("CHECKPOINT"))
        store.write(lambda c: forget_raw(c, NOW - timedelta(days=30), NOW))
        assert pending_spaces(store) == ["u1"]
        rewrite(store)
        store.close()
    finally:
        undo()
    found = find(tmp_path / "data", ["OLDMARKER4471", "CLOSEDMARKER5656", "NEWMARKER7878", "FACTMARKER9090"])
    assert found["OLDMARKER4471"] == [] and found["CLOSEDMARKER5656"] == []
    assert "memgate.duckdb" in found["NEWMARKER7878"] and "memgate.duckdb" in found["FACTMARKER9090"]
