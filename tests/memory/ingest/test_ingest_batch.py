"""Batched ingest (issue 13): a space's queued turns share one LLM call, each answer applied to
its own turn, each turn leaving the queue in the transaction that writes its rows.

Found: with a backlog, every queued turn paid its own call and its own copy of the system
prompt. Through the real litellm against the fake LLM, real DuckDB, real e5; the crash tests
SIGKILL a real worker process.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory import prompts
from memory.engine import MemoryEngine
from memory.ingest.capture import CapturedTurn, TurnMessage, capture
from memory.ingest.facts import ExtractedFact
from memory.ingest.queue import batches
from memory.store.connection import Store
from tests.fakes.llm_server import Delay, FakeError

LABEL = re.compile(r"note (\w+)-(\d+):")
PART = re.compile(r"^TURN (\d+)$", re.M)


def queue(store: Store, clock, space: str, count: int, start: int = 1) -> None:
    for n in range(start, start + count):
        text = f"note {space}-{n}: this is a long enough message about the orchard row {n} of {space}"
        capture(store, CapturedTurn(space_id=space, session_id=f"s-{space}", turn_id=f"{space}-{n}",
                                    created_at=clock.now(),
                                    messages=(TurnMessage("user", text), TurnMessage("assistant", f"Noted row {n}."))))
        clock.advance(seconds=1)


def fact(space: str, n: str) -> dict:
    return {"text": f"The user tends orchard row {n} of {space}", "category": "about_you", "tags": ["orchard"],
            "intent": "statement", "from": [1]}


def answer_for(turn_prompt: str) -> dict:
    """One turn's answer, marked with the turn's own label so rows show where they came from."""
    space, n = LABEL.search(turn_prompt).groups()
    return {"titles": {"1": f"orchard row {n} of {space}"}, "dedup": [], "facts": [fact(space, n)]}


def parts(user: str) -> list[str]:
    pieces = PART.split(user)
    return pieces[2::2]


def is_batch(req: dict) -> bool:
    return prompts.TURN_BATCH_NOTE in req["messages"][0]["content"]


def is_turn(req: dict) -> bool:
    return req["messages"][0]["content"].startswith(prompts.TURN_SYSTEM[:40])


def rows_per_turn(store: Store) -> dict[str, dict]:
    """For each turn: its chunks' titles and the facts whose sources are its chunks."""
    chunks = store.read(lambda c: c.execute(
        "SELECT turn_id, role, title FROM memories WHERE kind = 'chunk' AND status = 'active'").fetchall())
    facts = store.read(lambda c: c.execute(
        """SELECT m.turn_id, f.text FROM memories f JOIN fact_sources s ON s.fact_id = f.id
           JOIN memories m ON m.id = s.chunk_id WHERE f.kind = 'fact' AND f.status = 'active'""").fetchall())
    out: dict[str, dict] = {}
    for turn_id, role, title in chunks:
        out.setdefault(turn_id, {"titles": [], "facts": []})["titles"].append((role, title))
    for turn_id, text in facts:
        out.setdefault(turn_id, {"titles": [], "facts": []})["facts"].append(text)
    return out


async def test_a_batched_call_applies_each_turns_answer_to_that_turn_only(store, embedder, llm, fake_llm, clock):
    def respond(req: dict):
        if not is_turn(req):
            return json.dumps({"decisions": []})
        user = req["messages"][1]["content"]
        if is_batch(req):
            # Answered in reverse order: the keys, not the order, say which turn an answer is for.
            return json.dumps({"turns": {str(k): answer_for(p) for k, p in reversed(list(enumerate(parts(user), 1)))}})
        return json.dumps(answer_for(user))

    fake_llm.responder = respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now)
    queue(store, clock, "amy", 3)
    assert await engine.worker.drain() == 3
    turn_calls = [r for r in fake_llm.requests if is_turn(r)]
    assert len(turn_calls) == 1 and is_batch(turn_calls[0])
    assert turn_calls[0]["messages"][0]["content"].count(prompts.TURN_SYSTEM) == 1  # the system prompt once
    got = rows_per_turn(store)
    for n in (1, 2, 3):
        turn = got[f"amy-{n}"]
        assert ("user", f"orchard row {n} of amy") in turn["titles"], turn
        assert turn["facts"] == [f"The user tends orchard row {n} of amy"], turn
    assert store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status <> 'done'").fetchone()[0]) == 0


async def test_a_malformed_part_costs_only_that_turn_a_call_of_its_own(store, embedder, llm, fake_llm, clock):
    def respond(req: dict):
        if not is_turn(req):
            return json.dumps({"decisions": []})
        user = req["messages"][1]["content"]
        if is_batch(req):
            answers = {str(k): answer_for(p) for k, p in enumerate(parts(user), 1)}
            answers["2"] = {"titles": "not a mapping", "facts": "nor a list"}
            return json.dumps({"turns": answers})
        return json.dumps(answer_for(user))

    fake_llm.responder = respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now)
    queue(store, clock, "amy", 3)
    assert await engine.worker.drain() == 3
    singles = [r for r in fake_llm.requests if is_turn(r) and not is_batch(r)]
    assert [LABEL.search(r["messages"][1]["content"]).group(2) for r in singles] == ["2"]
    got = rows_per_turn(store)
    for n in (1, 2, 3):
        assert got[f"amy-{n}"]["facts"] == [f"The user tends orchard row {n} of amy"], got
    attempts = store.read(lambda c: c.execute("SELECT max(attempts) FROM ingest_queue").fetchone()[0])
    assert attempts == 0  # nothing failed: the malformed part was asked again alone


async def test_a_failed_batch_call_sends_each_turn_through_its_own_call(store, embedder, llm, fake_llm, clock):
    def respond(req: dict):
        if not is_turn(req):
            return json.dumps({"decisions": []})
        if is_batch(req):
            return FakeError(500, "batch too big for this model")
        return json.dumps(answer_for(req["messages"][1]["content"]))

    fake_llm.responder = respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now)
    queue(store, clock, "amy", 3)
    assert await engine.worker.drain() == 3
    got = rows_per_turn(store)
    assert all(got[f"amy-{n}"]["facts"] == [f"The user tends orchard row {n} of amy"] for n in (1, 2, 3)), got


async def test_a_turn_repeating_or_changing_a_batch_mates_fact_is_reconciled_in_the_batched_call(
        store, embedder, llm, fake_llm, clock):
    """Found: in a batch, a later turn's fact close to one its batch-mate had just written could
    not have been shown to the call, so it paid a reconcile call of its own (50 chats: 0.71
    reconcile calls per turn). The call gives it as "earlier": [k, i] instead."""
    said = {1: {"text": "The user lives in Lisbon"},
            2: {"text": "The user lives in Lisbon", "earlier": [1, 1], "action": "NOOP"},
            3: {"text": "The user has moved from Lisbon to Porto", "earlier": [1, 1], "action": "UPDATE"}}

    def respond(req: dict):
        if not is_turn(req):
            raise AssertionError("no call but the batched one is needed")
        user = req["messages"][1]["content"]
        assert is_batch(req), user
        return json.dumps({"turns": {str(k): {"titles": {}, "dedup": [], "facts": [
            {**said[int(LABEL.search(p).group(2))], "category": "about_you", "from": [1]}]}
            for k, p in enumerate(parts(user), 1)}})

    fake_llm.responder = respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now)
    queue(store, clock, "amy", 3)
    assert await engine.worker.drain() == 3
    assert [r["messages"][0]["content"][:30] for r in fake_llm.requests] == [prompts.TURN_SYSTEM[:30]]
    facts = store.read(lambda c: c.execute(
        "SELECT text, status, superseded_by IS NOT NULL FROM memories WHERE kind = 'fact' ORDER BY created_at, text").fetchall())
    assert facts == [("The user lives in Lisbon", "archived", True),
                     ("The user has moved from Lisbon to Porto", "active", False)], facts
    left = store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status <> 'done'").fetchone()[0])
    assert left == 0


@given(st.one_of(st.none(), st.integers(), st.text(max_size=12), st.lists(st.one_of(st.integers(), st.text(max_size=4)),
                                                                           max_size=3)))
def test_an_earlier_reference_is_a_pair_of_positive_numbers_or_none(value):
    got = ExtractedFact.model_validate({"text": "x", "earlier": value}).earlier
    assert got is None or (len(got) == 2 and all(isinstance(n, int) and n > 0 for n in got))


def test_batches_respect_the_token_budget_and_keep_retried_turns_alone():
    def row(n: int, attempts: int = 0, words: int = 10) -> tuple:
        payload = json.dumps({"created_at": "2026-01-01T00:00:00+00:00",
                              "messages": [{"role": "user", "text": " ".join(["word"] * words)}]})
        return (f"q{n}", "amy", "s", f"t{n}", payload, attempts)

    from memory.ingest.queue import payload_tokens

    rows = [row(1), row(2), row(3, attempts=1), row(4), row(5), row(6, words=400)]
    cost = payload_tokens(rows[0][4])
    got = [[r[0] for r in b] for b in batches(rows, budget=2 * cost)]
    assert got == [["q1", "q2"], ["q3"], ["q4", "q5"], ["q6"]]
    assert [[r[0] for r in b] for b in batches(rows, budget=1)] == [[r[0]] for r in rows]


@pytest.mark.parametrize("hang_at", ["batched_call", "second_turns_own_call"])
async def test_sigkill_mid_batch_ingests_each_turn_exactly_once(hang_at, tmp_path, embedder, llm, fake_llm, clock):
    """A worker process is SIGKILLed while a batch of three turns is being ingested: during the
    batched call itself, or after the batch's first turn was written and while the second turn's
    own call is out (its part of the batched answer was malformed). The next run leaves every turn's chunks and fact exactly once."""
    db = tmp_path / "m.duckdb"
    store = Store(db, 384)
    queue(store, clock, "amy", 3)
    store.close()
    hanging = True

    def respond(req: dict):
        if not is_turn(req):
            return json.dumps({"decisions": []})
        user = req["messages"][1]["content"]
        if not is_batch(req):
            answer = json.dumps(answer_for(user))
            return Delay(3600, answer) if hanging and hang_at == "second_turns_own_call" else answer
        answers = {str(k): answer_for(p) for k, p in enumerate(parts(user), 1)}
        if hang_at == "second_turns_own_call" and hanging:
            answers["2"] = {"facts": "not a list"}  # turn 2 goes through a call of its own
        answer = json.dumps({"turns": answers})
        return Delay(3600, answer) if hanging and hang_at == "batched_call" else answer

    fake_llm.responder = respond
    child = Path(__file__).with_name("ingest_child.py")
    proc = await asyncio.create_subprocess_exec(sys.executable, str(child), str(db), fake_llm.base_url, "4",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    wanted = (lambda r: is_batch(r)) if hang_at == "batched_call" else (lambda r: is_turn(r) and not is_batch(r))
    try:
        for _ in range(3000):
            if any(wanted(r) for r in fake_llm.requests):
                await asyncio.sleep(0.2)  # the request is in flight: the fake holds it for an hour
                break
            if proc.returncode is not None:
                raise AssertionError((await proc.stderr.read()).decode()[-2000:])
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the batch never reached the point to kill it at")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    batched = [r for r in fake_llm.requests if is_batch(r)]
    assert batched and len(parts(batched[0]["messages"][1]["content"])) == 3  # the three turns shared one call
    hanging = False
    store = Store(db, 384)
    try:
        if hang_at == "second_turns_own_call":
            # Killed after turn 1's transaction: turn 1 left the queue, turns 2 and 3 did not.
            done = store.read(lambda c: c.execute(
                "SELECT turn_id FROM ingest_queue WHERE status = 'done' ORDER BY turn_id").fetchall())
            assert done == [("amy-1",)]
        engine = MemoryEngine(store, embedder, llm, clock=clock.now)
        await engine.worker.drain()
        chunks = store.read(lambda c: c.execute(
            "SELECT text, count(*) FROM memories WHERE kind = 'chunk' AND status = 'active' GROUP BY text").fetchall())
        facts = store.read(lambda c: c.execute(
            "SELECT text, count(*) FROM memories WHERE kind = 'fact' AND status = 'active' GROUP BY text").fetchall())
        left = store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status <> 'done'").fetchone()[0])
    finally:
        store.close()
    chunks, facts = dict(chunks), dict(facts)
    for n in (1, 2, 3):
        assert sum(v for t, v in chunks.items() if t.startswith(f"note amy-{n}:")) == 1, chunks
        assert chunks.get(f"Noted row {n}.") == 1, chunks
        assert facts.get(f"The user tends orchard row {n} of amy") == 1, facts
    assert left == 0
