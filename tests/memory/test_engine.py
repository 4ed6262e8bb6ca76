"""Engine operations the tools and commands use: timeline, forget, pin, export/import, and
switching the embedding model (re-embed, dimension change) through litellm."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.embed import LiteLLMEmbedder
from memory.engine import MemoryEngine
from memory.store.connection import Store


async def chat(engine, clock, space, session, lines):
    for i, (user, reply) in enumerate(lines):
        await engine.capture(CapturedTurn(space, session, f"{session}-{i}", clock.now(),
                                          (TurnMessage("user", user), TurnMessage("assistant", reply))))
        clock.advance(minutes=1)
    await engine.worker.drain()


async def test_timeline_forget_pin_and_export(store, embedder, clock, tmp_path):
    engine = MemoryEngine(store, embedder, None, data_dir=tmp_path, clock=clock.now)
    await chat(engine, clock, "u:a", "s1", [("I adopted a kitten", "Congrats!"), ("Her name is Pixel", "Cute name."),
                                           ("She is grey with white paws", "Lovely."), ("I also have a parrot", "Nice")])
    hits = await engine.search("kitten name Pixel", ["u:a"])
    pixel = next(h for h in hits if h.text == "Her name is Pixel")
    around = await engine.timeline(pixel.id, ["u:a"], window=1)
    assert [r.text for r in around] == ["Congrats!", "Her name is Pixel", "Cute name."]
    assert await engine.timeline(pixel.id, ["u:other"]) == []
    res = await engine.forget([pixel.id], ["u:other"])
    assert res.forgotten == () and res.refused == (pixel.id,)
    res = await engine.forget([pixel.id], ["u:a"])
    assert res.forgotten == (pixel.id,)
    assert all(h.id != pixel.id for h in await engine.search("Pixel", ["u:a"]))
    fact = await engine.remember("Pixel was born in May", "u:a")
    assert await engine.set_pinned(fact.id, ["u:a"], True)
    assert not await engine.set_pinned(fact.id, ["u:b"], True)
    rows = [json.loads(line) for line in engine.export_jsonl(["u:a"]).decode().splitlines()]
    assert {r["text"] for r in rows} >= {"Pixel was born in May", "I adopted a kitten"}
    assert "Her name is Pixel" not in {r["text"] for r in rows}
    assert all(r["space_id"] == "u:a" for r in rows)


@pytest.mark.duckdb_only("reembed's column swap and its checks (duckdb_indexes, reopening the file) are DuckDB's")
async def test_reembed_switches_model_and_dimension(store, embedder, clock, tmp_path, fake_llm):
    engine = MemoryEngine(store, embedder, None, data_dir=tmp_path, clock=clock.now)
    await chat(engine, clock, "u:a", "s1", [("I play the cello in an orchestra", "Wonderful"),
                                           ("My orchestra rehearses on Mondays", "Got it")])
    fake_llm.embed_dim = 64
    other = LiteLLMEmbedder("openai/fake-embed", 64, api_base=fake_llm.base_url, api_key="sk-test")
    progress = []
    n = await asyncio.to_thread(engine.reembed, other, progress=progress.append)  # sync, like the CLI
    assert n == 4 and sum(progress) == 4
    assert store.dim == 64 and store.meta_get("embedding_dim") == "64"
    dims = store.read(lambda c: c.execute("SELECT DISTINCT len(embedding) FROM memories").fetchall())
    assert dims == [(64,)]
    assert len(fake_llm.embedding_requests) >= 1
    # Exact text still comes first (the fake's vectors are hash-based, so use the same words).
    hits = await asyncio.to_thread(engine.recaller.search, "I play the cello in an orchestra", ["u:a"])
    assert hits and hits[0].text == "I play the cello in an orchestra"
    # The dimension survives a reopen.
    path = store.path
    store.close()
    reopened = Store(path, 384)
    assert reopened.dim == 64
    # The recall lookup indexes had to go for the column swap; they are back.
    names = {r[0] for r in reopened.read(lambda c: c.execute(
        "SELECT index_name FROM duckdb_indexes() WHERE table_name = 'memories'").fetchall())}
    assert {"memories_session", "memories_seq"} <= names
    reopened.close()


async def test_import_into_another_space_keeps_kinds_and_pins(store, embedder, clock, tmp_path):
    engine = MemoryEngine(store, embedder, None, data_dir=tmp_path, clock=clock.now)
    await engine.remember("I am left-handed", "u:a", pinned=True)
    clock.advance(days=1)
    rows = list(engine.export_rows(["u:a"]))
    report = engine.import_rows(rows, space_id="u:b")
    assert report.added == 1 and len(report.ids) == 1
    got = await engine.list(["u:b"])
    assert [(r.text, r.pinned, r.kind) for r in got] == [("I am left-handed", True, "fact")]
    assert got[0].created_at < clock.now().replace(tzinfo=None) - timedelta(hours=23)
