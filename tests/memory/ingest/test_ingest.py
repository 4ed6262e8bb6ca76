"""Ingest through the real litellm against the scripted fake LLM: ADD / UPDATE / DELETE / NOOP,
pins, dedup, provenance, redaction, LLM failure and raw fallback."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from memory.ingest.capture import CapturedTurn, TurnMessage, capture
from memory.engine import MemoryEngine
from memory.ingest.settings import IngestSettings


def turn_answer(facts=(), titles=None, dedup=()):
    return json.dumps({"titles": titles or {}, "dedup": list(dedup), "facts": list(facts)})


def fact(text, category="about_you", tags=("life",), frm=(1,), intent="statement"):
    return {"text": text, "category": category, "tags": list(tags), "intent": intent, "from": list(frm)}


def system_of(request: dict) -> str:
    return request["messages"][0]["content"]


def user_of(request: dict) -> str:
    return request["messages"][1]["content"]


@pytest.fixture
def engine(store, embedder, llm, clock, tmp_path):
    return MemoryEngine(store, embedder, llm, data_dir=tmp_path, clock=clock.now,
                        ingest_settings=IngestSettings(backoff_seconds=60, max_attempts=3))


@pytest.fixture
def separate(store, embedder, llm, clock, tmp_path):
    """An engine that always reconciles in the separate call (the path of facts the ingest call
    was not shown, and of `fold_reconcile = False`)."""
    return MemoryEngine(store, embedder, llm, data_dir=tmp_path, clock=clock.now,
                        ingest_settings=IngestSettings(backoff_seconds=60, max_attempts=3, fold_reconcile=False))


_turns = iter(range(10_000))


async def say(engine, clock, text, reply="Noted.", space="u:alice", session="s1"):
    turn = CapturedTurn(space_id=space, session_id=session, turn_id=f"t{next(_turns)}", created_at=clock.now(),
                        messages=(TurnMessage("user", text), TurnMessage("assistant", reply)))
    assert await engine.capture(turn)
    return await engine.worker.drain()


def facts_of(engine, space="u:alice", status=None):
    sql = "SELECT id, text, status, superseded_by, pinned FROM memories WHERE kind = 'fact' AND space_id = ?"
    params = [space]
    if status:
        sql += " AND status = ?"
        params.append(status)
    return engine.store.read(lambda c: c.execute(sql + " ORDER BY created_at, id", params).fetchall())


async def test_add_without_candidates_is_one_call_with_provenance(engine, fake_llm, clock):
    fake_llm.script(turn_answer([fact("Alice lives in Berlin")]))
    assert await say(engine, clock, "I live in Berlin with my cat.") == 1
    assert fake_llm.calls == 1  # nothing to reconcile: one call per turn
    rows = facts_of(engine)
    assert [(r[1], r[2]) for r in rows] == [("Alice lives in Berlin", "active")]
    src = engine.store.read(lambda c: c.execute(
        "SELECT m.role, m.text FROM fact_sources s JOIN memories m ON m.id = s.chunk_id WHERE s.fact_id = ?", [rows[0][0]]).fetchall())
    assert src == [("user", "I live in Berlin with my cat.")]


async def test_update_archives_old_fact_and_shows_small_ids_and_ages(separate, fake_llm, clock):
    engine = separate
    fake_llm.script(turn_answer([fact("Alice lives in Berlin")]))
    await say(engine, clock, "I live in Berlin.")
    clock.advance(days=3)
    fake_llm.script(turn_answer([fact("Alice lives in Munich")]),
                    json.dumps({"decisions": [{"new": "a", "action": "UPDATE", "target": 1, "text": "Alice lives in Munich (moved from Berlin)"}]}))
    await say(engine, clock, "I moved to Munich last week.")
    assert fake_llm.calls == 3  # 1 + 2: extraction, then reconciliation
    shown = user_of(fake_llm.requests[-1])
    assert "[1] (3 days ago) Alice lives in Berlin" in shown
    assert not re.search(r"\b[fct]_[0-9a-f]{12}\b", shown) and not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}", shown)
    old, new = facts_of(engine)
    assert old[2] == "archived" and old[3] == new[0]
    assert new[1] == "Alice lives in Munich (moved from Berlin)" and new[2] == "active"
    # The new version inherits the provenance of the old one.
    n_sources = engine.store.read(lambda c: c.execute("SELECT count(*) FROM fact_sources WHERE fact_id = ?", [new[0]]).fetchone()[0])
    assert n_sources == 2


async def test_delete_marks_deleted_but_pinned_survives(separate, fake_llm, clock):
    engine = separate
    pinned = await engine.remember("Alice is vegetarian", "u:alice", pinned=True)
    fake_llm.script(turn_answer([fact("Alice is a vegetarian now")]))
    fake_llm.script(json.dumps({"decisions": [{"new": "a", "action": "NOOP"}]}))
    await say(engine, clock, "Just so you know, I'm vegetarian.")
    fake_llm.script(turn_answer([fact("Alice is no longer vegetarian")]),
                    json.dumps({"decisions": [{"new": "a", "action": "DELETE", "target": 1}]}))
    await say(engine, clock, "I stopped being vegetarian.")
    rows = {r[1]: r for r in facts_of(engine)}
    assert rows["Alice is vegetarian"][2] == "active"  # pinned: never deleted
    assert "Alice is a vegetarian now" not in rows  # NOOP wrote nothing
    # An unpinned fact is deleted by DELETE.
    other = await engine.remember("Alice drinks coffee every morning", "u:alice")
    def delete_coffee(req):
        line = next(l for l in user_of(req).splitlines() if "coffee every morning" in l)
        return json.dumps({"decisions": [{"new": "a", "action": "DELETE", "target": int(line[1:line.index("]")])}]})

    fake_llm.script(turn_answer([fact("Alice quit coffee")]), delete_coffee)
    await say(engine, clock, "I quit coffee completely.")
    status = dict((r[0], r[2]) for r in facts_of(engine))
    assert status[other.id] == "deleted" and status[pinned.id] == "active"


async def test_update_of_pinned_fact_adds_beside_it(separate, fake_llm, clock):
    engine = separate
    pinned = await engine.remember("Alice's sister is called Jane", "u:alice", pinned=True)
    fake_llm.script(turn_answer([fact("Alice's sister Jane lives in Rome")]),
                    json.dumps({"decisions": [{"new": "a", "action": "UPDATE", "target": 1, "text": "Alice's sister is Jane, she lives in Rome"}]}))
    await say(engine, clock, "My sister Jane lives in Rome.")
    rows = facts_of(engine)
    assert (pinned.id, "Alice's sister is called Jane", "active", None, True) in rows
    assert any(r[1] == "Alice's sister is Jane, she lives in Rome" and r[2] == "active" for r in rows)


async def test_exact_duplicate_skips_without_llm(engine, fake_llm, clock):
    fake_llm.script(turn_answer([fact("Alice likes jazz")]))
    await say(engine, clock, "I really like jazz.", reply="Jazz is great!")
    calls = fake_llm.calls
    await say(engine, clock, "I really like jazz.", reply="Jazz is great!")
    assert fake_llm.calls == calls
    n = engine.store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE kind = 'chunk'").fetchone()[0])
    assert n == 2


async def test_near_duplicate_is_merged_with_history(engine, fake_llm, clock):
    first = "My favourite programming language is Python, I use it every day at work."
    second = "My favourite programming language is Python and I use it every day at work for data analysis."
    fake_llm.script(turn_answer())
    await say(engine, clock, first, reply="Nice.")
    old_id = engine.store.read(lambda c: c.execute("SELECT id FROM memories WHERE text = ?", [first]).fetchone()[0])

    def judge(req):
        body = user_of(req)
        assert "POSSIBLE DUPLICATES:\nmessage 1 resembles:" in body and first in body
        return turn_answer(dedup=[{"message": 1, "verdict": "UPDATE", "target": 1,
                                   "merged": "Favourite language: Python, used every day at work for data analysis."}])

    fake_llm.script(judge)
    await say(engine, clock, second, reply="Nice!")
    new = engine.store.read(lambda c: c.execute(
        "SELECT id, status, merge_history FROM memories WHERE text LIKE 'Favourite language%'").fetchone())
    assert new[1] == "active"
    history = json.loads(new[2])
    assert history[0]["id"] == old_id and history[0]["text"] == first
    old = engine.store.read(lambda c: c.execute("SELECT status, superseded_by FROM memories WHERE id = ?", [old_id]).fetchone())
    assert old == ("retired", new[0])


async def test_queries_are_not_facts_and_assistant_facts_are_dropped(engine, fake_llm, clock):
    fake_llm.script(turn_answer([fact("Alice asked for the weather", intent="query"),
                                 fact("The assistant likes tea", frm=(2,)),
                                 fact("Alice has a dog named Rex")]))
    await say(engine, clock, "What's the weather? By the way my dog Rex is sick.", reply="I like tea.")
    assert [r[1] for r in facts_of(engine)] == ["Alice has a dog named Rex"]


async def test_secrets_never_reach_the_llm(engine, fake_llm, clock):
    fake_llm.script(turn_answer())
    await say(engine, clock, "my openai key is sk-proj-abcdefghijklmnopqrstuvwxyz123456 and password: hunter22")
    sent = json.dumps(fake_llm.requests)
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz123456" not in sent and "hunter22" not in sent
    assert "[REDACTED" in sent


async def test_llm_down_retries_then_stores_raw_then_extracts_later(engine, fake_llm, clock):
    fake_llm.fail_next(1)
    assert await say(engine, clock, "I was born in Lisbon in 1990.") == 1
    row = engine.store.read(lambda c: c.execute("SELECT status, attempts FROM ingest_queue").fetchone())
    assert row == ("pending", 1)
    assert await engine.worker.drain() == 0  # backing off: not due yet
    for _ in range(2):
        clock.advance(hours=1)
        fake_llm.fail_next(1)
        await engine.worker.drain()
    row = engine.store.read(lambda c: c.execute("SELECT status FROM ingest_queue").fetchone())
    assert row == ("raw",)
    # Stored raw: still findable, marked for fact extraction.
    hits = await engine.search("where was she born", ["u:alice"])
    assert any("Lisbon" in h.text for h in hits)
    assert facts_of(engine) == []
    fake_llm.script(json.dumps({"facts": [fact("Alice was born in Lisbon in 1990")]}))
    assert await engine.worker.extract_pending_facts() == 1
    assert [r[1] for r in facts_of(engine)] == ["Alice was born in Lisbon in 1990"]
    assert engine.store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE needs_facts").fetchone()[0]) == 0


async def test_invalid_json_gets_one_repair_round(engine, fake_llm, clock):
    fake_llm.script("this is not json", turn_answer([fact("Alice plays chess")]))
    await say(engine, clock, "I play chess on Sundays.")
    assert fake_llm.calls == 2
    assert "not valid" in fake_llm.requests[1]["messages"][-1]["content"]
    assert [r[1] for r in facts_of(engine)] == ["Alice plays chess"]


async def test_raw_mode_without_llm(store, embedder, clock, tmp_path):
    engine = MemoryEngine(store, embedder, None, data_dir=tmp_path, clock=clock.now)
    await say(engine, clock, "I keep bees in my garden.", reply="Lovely!")
    rows = store.read(lambda c: c.execute("SELECT kind, role, text FROM memories ORDER BY created_at").fetchall())
    assert rows == [("chunk", "user", "I keep bees in my garden."), ("chunk", "assistant", "Lovely!")]
    assert store.read(lambda c: c.execute("SELECT status FROM ingest_queue").fetchone()) == ("done",)


async def test_raw_mode_stores_a_claims_turns_with_one_embedding_run(store, embedder, clock, tmp_path):
    """Without an LLM a backlog is stored a claim at a time: one model run, one write (it used to
    take one turn per claim, two texts a run); an exact duplicate inside the claim is stored once."""
    runs = []

    class Counted:  # the real model, its runs counted
        name, dim = embedder.name, embedder.dim

        def embed_passages(self, texts):
            runs.append(len(texts))
            return embedder.embed_passages(texts)

        def embed_query(self, text):
            return embedder.embed_query(text)

    engine = MemoryEngine(store, Counted(), None, data_dir=tmp_path, clock=clock.now)
    for i, text in enumerate(["I keep bees.", "My hives are in the orchard.", "I keep bees.", "Honey comes in June."]):
        await engine.capture(CapturedTurn(space_id="u:alice", session_id="s1", turn_id=f"raw{i}", created_at=clock.now(),
                                          messages=(TurnMessage("user", text), TurnMessage("assistant", f"Noted {i}."))))
        clock.advance(minutes=1)
    assert await engine.worker.drain() == 4
    assert runs == [7]
    rows = store.read(lambda c: c.execute("SELECT text FROM memories ORDER BY created_at").fetchall())
    assert [r[0] for r in rows] == ["I keep bees.", "Noted 0.", "My hives are in the orchard.", "Noted 1.", "Noted 2.",
                                    "Honey comes in June.", "Noted 3."]
    assert store.read(lambda c: c.execute("SELECT DISTINCT status FROM ingest_queue").fetchall()) == [("done",)]


async def test_a_turn_is_ingested_once(engine, fake_llm, clock):
    turn = CapturedTurn(space_id="u:alice", session_id="s", turn_id="same", created_at=clock.now(),
                        messages=(TurnMessage("user", "I am a nurse."),))
    fake_llm.script(turn_answer([fact("Alice is a nurse")]))
    capture(engine.store, turn)
    capture(engine.store, turn)  # a retried capture of the same turn
    await engine.worker.drain()
    await engine.worker.drain()
    assert fake_llm.calls == 1
    assert len(facts_of(engine)) == 1


async def test_a_turns_first_message_is_embedded_with_the_sessions_previous_message(store, embedder, clock, tmp_path):
    """Production = bench: every chunk's vector carries the message before it in its session
    (bench/recall_locomo.py measures exactly that), also across turns; never across sessions."""
    from memory.ingest.raw import embed_text
    from memory.store.vectors import fetch_vectors

    engine = MemoryEngine(store, embedder, None, data_dir=tmp_path, clock=clock.now)
    await say(engine, clock, "Which day is the pottery class?", reply="It is on Tuesday evenings.", session="s1")
    clock.advance(minutes=1)
    await say(engine, clock, "Great, book it for me.", reply="Booked.", session="s1")
    clock.advance(minutes=1)
    await say(engine, clock, "Hello again.", reply="Hi!", session="s2")
    rows = dict(store.read(lambda c: c.execute("SELECT text, id FROM memories").fetchall()))
    got = store.read(lambda c: fetch_vectors(c, list(rows.values())))

    def expected(text, context, context_speaker):
        return embedder.embed_passages([embed_text(text, None, context, context_speaker)])[0]

    assert np.allclose(got[rows["Great, book it for me."]], expected("Great, book it for me.", "It is on Tuesday evenings.", "assistant"), atol=1e-5)
    assert np.allclose(got[rows["Booked."]], expected("Booked.", "Great, book it for me.", "user"), atol=1e-5)
    assert np.allclose(got[rows["Hello again."]], expected("Hello again.", None, None), atol=1e-5)
    assert np.allclose(got[rows["Which day is the pottery class?"]], expected("Which day is the pottery class?", None, None), atol=1e-5)


def known_id(req: dict, text: str) -> int:
    """The id the ingest call's KNOWN FACTS section shows `text` under (fails if not shown)."""
    section = user_of(req).split("KNOWN FACTS", 1)[1]
    line = next(ln for ln in section.splitlines() if ln.endswith(f") {text}"))
    return int(line[1:line.index("]")])


async def test_the_ingest_call_reconciles_against_the_facts_it_is_shown(engine, fake_llm, clock):
    """Found: a turn whose facts had close stored facts paid a second call (0.3 calls a turn on
    turn_cost). The close facts now ride along in the ingest call as KNOWN FACTS with small ids
    and ages; its UPDATE / NOOP / DELETE are applied as the reconcile call's were. (One stored
    fact per space here, so each turn's close facts are exactly the ones shown.)"""
    berlin = await engine.remember("Alice lives in Berlin", "u:a1")
    pinned = await engine.remember("Alice is vegetarian", "u:a2", pinned=True)
    coffee = await engine.remember("Alice drinks coffee every morning", "u:a3")
    clock.advance(days=3)

    def update(req):
        assert "(3 days ago) Alice lives in Berlin" in user_of(req)
        return turn_answer([{**fact("Alice lives in Munich (moved from Berlin)"), "known": known_id(req, "Alice lives in Berlin"),
                             "action": "UPDATE"}])

    fake_llm.script(update)
    await say(engine, clock, "Alice lives in Munich now, she moved from Berlin.", space="u:a1")
    assert fake_llm.calls == 1  # no second call: the call saw every close fact
    rows = {r[0]: r for r in facts_of(engine, space="u:a1")}
    assert rows[berlin.id][2] == "archived"
    new = next(r for r in rows.values() if r[1] == "Alice lives in Munich (moved from Berlin)")
    assert new[2] == "active" and rows[berlin.id][3] == new[0]
    assert not re.search(r"\b[fct]_[0-9a-f]{12}\b", user_of(fake_llm.requests[0]))  # small ids only, never ours

    fake_llm.script(lambda req: turn_answer([{**fact("Alice is vegetarian"), "known": known_id(req, "Alice is vegetarian"),
                                              "action": "NOOP"}]))
    await say(engine, clock, "Alice is vegetarian, as you know.", space="u:a2")
    assert [r[1] for r in facts_of(engine, space="u:a2")] == ["Alice is vegetarian"]  # NOOP: no copy
    fake_llm.script(lambda req: turn_answer([
        {**fact("Alice is no longer vegetarian"), "known": known_id(req, "Alice is vegetarian"), "action": "DELETE"}]))
    await say(engine, clock, "Alice is no longer vegetarian.", space="u:a2")
    fake_llm.script(lambda req: turn_answer([
        {**fact("Alice no longer drinks coffee"), "known": known_id(req, "Alice drinks coffee every morning"),
         "action": "DELETE"}]))
    await say(engine, clock, "Alice no longer drinks coffee every morning.", space="u:a3")
    assert fake_llm.calls == 4
    assert facts_of(engine, space="u:a2")[0][2] == "active"  # pinned: never deleted
    assert facts_of(engine, space="u:a3")[0][2] == "deleted"


async def test_a_close_fact_the_call_was_not_shown_still_gets_the_reconcile_call(engine, fake_llm, clock):
    """The user's message is far from a stored fact its extracted fact is close to (the probe
    missed it): the separate reconcile call decides, as before."""
    await engine.remember("Alice lives in Berlin", "u:alice")
    fake_llm.script(turn_answer([fact("Alice lives in Munich")]),
                    json.dumps({"decisions": [{"new": "a", "action": "UPDATE", "target": 1,
                                               "text": "Alice lives in Munich (moved from Berlin)"}]}))
    await say(engine, clock, "I moved last week.")
    assert "KNOWN FACTS" not in user_of(fake_llm.requests[0])
    assert system_of(fake_llm.requests[1]).startswith("You keep a person's fact list correct")
    assert [r[1] for r in facts_of(engine, status="active")] == ["Alice lives in Munich (moved from Berlin)"]
