"""Concurrent ingest (issue 13): different spaces in parallel, one space's turns in queue order.

Found: one IngestWorker processed one turn at a time for all people together; with a real model
(1-3 s a call) the facts of 50 active people lagged by hours. Now a bounded pool ingests up to
`workers` spaces at once. Through the real litellm against the fake LLM, real DuckDB, real e5.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import prompts
from memory.engine import MemoryEngine
from memory.llm import LiteLLM, LLMSettings
from memory.ingest.capture import CapturedTurn, TurnMessage, capture
from memory.ingest.queue import next_space_turns
from memory.ingest.settings import IngestSettings
from memory.store.connection import Store
from memory.store.rows import utc_naive
from tests.fakes.llm_server import Delay

LABEL = re.compile(r"note (\w+)-(\d+):")
ASKED = re.compile(r"^\[\d+\] user: note (\w+)-(\d+):", re.M)  # a turn's own message, not a duplicate candidate


class Ledger:
    """What the fake memory model saw: when each ingest call started and finished, and the
    turns it carried (one, or several of one space in a batched call)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.events: list[tuple[str, str, tuple[int, ...]]] = []  # ("start" | "done", space, turn numbers)

    def respond(self, req: dict):
        content = req["messages"][0]["content"]
        if not content.startswith(prompts.TURN_SYSTEM[:40]):
            return "OK"
        labels = ASKED.findall(req["messages"][1]["content"])
        space, ns = labels[0][0], tuple(int(n) for _, n in labels)
        assert {s for s, _ in labels} == {space}, labels  # a batch never mixes spaces
        self.events.append(("start", space, ns))
        empty = {"titles": {}, "dedup": [], "facts": []}
        batched = prompts.TURN_BATCH_NOTE in content

        def done(_req: dict) -> str:
            self.events.append(("done", space, ns))
            return json.dumps({"turns": {str(k): empty for k in range(1, len(ns) + 1)}} if batched else empty)

        return Delay(self.seconds, done)

    def starts(self, space: str) -> list[int]:
        return [n for kind, s, ns in self.events if kind == "start" and s == space for n in ns]

    def max_in_flight(self) -> int:
        live = best = 0
        for kind, _, _ in self.events:
            live += 1 if kind == "start" else -1
            best = max(best, live)
        return best

    def overlaps_within_a_space(self) -> bool:
        live: dict[str, int] = {}
        for kind, s, _ in self.events:
            live[s] = live.get(s, 0) + (1 if kind == "start" else -1)
            if live[s] > 1:
                return True
        return False


def queue(store: Store, clock, order: list[str], numbers: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
    """Capture one turn per entry of `order` (a space name), a second apart; the turn numbers per
    space (going on from `numbers` when given)."""
    numbers = {} if numbers is None else numbers
    for space in order:
        n = len(numbers.setdefault(space, [])) + 1
        numbers[space].append(n)
        text = f"note {space}-{n}: this is a long enough message about the garden number {n} in {space}"
        capture(store, CapturedTurn(space_id=space, session_id=f"s-{space}", turn_id=f"{space}-{n}",
                                    created_at=clock.now(),
                                    messages=(TurnMessage("user", text), TurnMessage("assistant", "Noted."))))
        clock.advance(seconds=1)
    return numbers


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.sampled_from(["amy", "bob", "cyd"]), min_size=1, max_size=7),
       workers=st.integers(1, 4), per_space=st.integers(1, 3), batch_tokens=st.sampled_from([1, 60, 2000]))
async def test_each_space_is_ingested_in_queue_order_whatever_the_interleaving(
        order, workers, per_space, batch_tokens, tmp_path_factory, embedder, llm, fake_llm, clock):
    ledger = Ledger(0.02)
    fake_llm.responder = ledger.respond
    store = Store(tmp_path_factory.mktemp("pool") / "m.duckdb", 384)
    try:
        engine = MemoryEngine(store, embedder, llm, clock=clock.now,
                              ingest_settings=IngestSettings(workers=workers, per_space=per_space,
                                                             batch_tokens=batch_tokens))
        numbers = queue(store, clock, order)
        assert await engine.worker.drain() == len(order)
        for space, expected in numbers.items():
            assert ledger.starts(space) == expected, (space, ledger.events)
        assert not ledger.overlaps_within_a_space(), ledger.events
        left = store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status <> 'done'").fetchone()[0])
        assert left == 0
    finally:
        store.close()


async def test_different_spaces_are_ingested_at_the_same_time(store, embedder, llm, fake_llm, clock):
    # One second per call: a single worker would have exactly one call in flight at any time.
    ledger = Ledger(1.0)
    fake_llm.responder = ledger.respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(workers=4))
    queue(store, clock, ["amy", "bob", "cyd", "dee", "amy", "bob"])
    assert await engine.worker.drain() == 6
    assert ledger.max_in_flight() >= 2, ledger.events
    assert not ledger.overlaps_within_a_space(), ledger.events


async def test_one_worker_never_has_two_calls_in_flight(store, embedder, llm, fake_llm, clock):
    ledger = Ledger(0.05)
    fake_llm.responder = ledger.respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(workers=1))
    queue(store, clock, ["amy", "bob", "amy", "cyd"])
    await engine.worker.drain()
    assert ledger.max_in_flight() == 1
    assert ledger.starts("amy") == [1, 2] and ledger.starts("bob") == [1] and ledger.starts("cyd") == [1]


def test_a_claim_is_the_oldest_waiting_space_not_held_at_most_per_space_turns(store, clock):
    queue(store, clock, ["amy"] * 10 + ["bob", "cyd", "bob"])
    later = utc_naive(clock.now() + timedelta(hours=1))
    turns = lambda held: [r[3] for r in store.read(lambda c: next_space_turns(c, later, held, 3))]
    assert turns(set()) == ["amy-1", "amy-2", "amy-3"]   # the oldest three of the oldest space, in order
    assert turns({"amy"}) == ["bob-1", "bob-2"]          # bob's turns are not stuck behind amy's backlog
    assert turns({"amy", "bob"}) == ["cyd-1"]
    assert turns({"amy", "bob", "cyd"}) == []
    assert store.read(lambda c: next_space_turns(c, utc_naive(clock.now() - timedelta(days=1)), set(), 3)) == []


async def test_a_space_that_waited_has_its_queued_turns_share_one_call(store, embedder, llm, fake_llm, clock):
    # One slot busy with amy's first turn while amy queues four more: they go together next.
    ledger = Ledger(0.3)
    fake_llm.responder = ledger.respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(workers=2))
    numbers = queue(store, clock, ["amy"])
    draining = asyncio.create_task(engine.worker.drain())
    while not ledger.events:
        await asyncio.sleep(0.01)
    queue(store, clock, ["amy"] * 4 + ["bob"], numbers)
    engine.worker.notify()
    assert await draining + await engine.worker.drain() == 6
    calls = [ns for kind, s, ns in ledger.events if kind == "start" and s == "amy"]
    assert calls == [(1,), (2, 3, 4, 5)], ledger.events
    assert not ledger.overlaps_within_a_space(), ledger.events


async def test_a_turn_queued_while_another_space_waits_on_the_model_is_ingested_at_once(
        store, embedder, fake_llm, clock):
    """Found: the pool drained in rounds, and a turn queued during a round waited for the round's
    slowest call (50 chats: 321 s of backlog after the last reply). Now a free slot claims it."""
    ledger = Ledger(0.01)

    def respond(req: dict):
        item = ledger.respond(req)
        if isinstance(item, Delay) and "note amy-" in req["messages"][1]["content"]:
            return Delay(120, item.then)  # amy's model "thinks" longer than the test waits
        return item

    fake_llm.responder = respond
    slow = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, api_key="sk-test",
                               timeout=300, retries=0))  # no timeout ends amy's call meanwhile
    engine = MemoryEngine(store, embedder, slow, clock=clock.now, ingest_settings=IngestSettings(workers=2))
    numbers = queue(store, clock, ["amy"])
    draining = asyncio.create_task(engine.worker.drain())
    try:
        for _ in range(1200):
            if ledger.starts("amy"):
                break
            await asyncio.sleep(0.05)
        queue(store, clock, ["bob"], numbers)
        engine.worker.notify()
        status = lambda turn: store.read(lambda c: c.execute(
            "SELECT status FROM ingest_queue WHERE turn_id = ?", [turn]).fetchone()[0])
        for _ in range(1200):  # a minute at most
            if status("bob-1") == "done":
                break
            await asyncio.sleep(0.05)
        assert status("bob-1") == "done", f"bob's turn waited for amy's call: {ledger.events}"
        assert ("done", "amy", (1,)) not in ledger.events and status("amy-1") == "pending"
    finally:
        draining.cancel()  # amy's turn stays queued (the exactly-once tests cover a cut-off call)


async def test_sigkill_mid_batch_ingests_every_turn_exactly_once(tmp_path, embedder, llm, fake_llm, clock):
    """A worker process is killed while three spaces have calls in flight and others are done;
    the next run ingests what is left: every turn's chunk and fact exactly once."""
    import signal
    import sys
    from pathlib import Path

    db = tmp_path / "m.duckdb"
    store = Store(db, 384)
    order = ["amy", "bob", "cyd", "amy", "bob", "cyd", "amy"]
    numbers = queue(store, clock, order)
    store.close()
    finished: list[str] = []

    def respond(req: dict):
        content = req["messages"][0]["content"]
        if content.startswith(prompts.RECONCILE_SYSTEM[:40]):
            return json.dumps({"decisions": []})  # no decision: every new fact is added
        if not content.startswith(prompts.TURN_SYSTEM[:40]):
            return "OK"
        space, n = LABEL.search(req["messages"][1]["content"]).groups()
        label = f"{space}-{n}"
        fact = {"text": f"The user keeps garden number {n} in {space}", "category": "about_you", "tags": ["garden"],
                "intent": "statement", "from": [1]}
        answer = json.dumps({"titles": {}, "dedup": [], "facts": [fact]})
        if n == "1":
            finished.append(label)
            return answer
        return Delay(3600, answer)  # still "thinking" when the process dies

    fake_llm.responder = respond
    child = Path(__file__).with_name("ingest_child.py")
    # One turn per call (a budget no turn fits with another): the batched case is the next test.
    proc = await asyncio.create_subprocess_exec(sys.executable, str(child), str(db), fake_llm.base_url, "4", "1",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        for _ in range(3000):  # the first turn of each space done, the second ones in flight
            hung = sum(1 for r in fake_llm.requests if LABEL.search(r["messages"][-1]["content"] or "")
                       and not LABEL.search(r["messages"][-1]["content"]).group(2) == "1")
            if len(finished) == 3 and hung >= 2:
                break
            if proc.returncode is not None:
                raise AssertionError((await proc.stderr.read()).decode()[-2000:])
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"never reached mid-batch: finished {finished}")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    def respond_now(req: dict):
        item = respond(req)
        return item.then if isinstance(item, Delay) else item

    fake_llm.responder = respond_now
    store = Store(db, 384)
    try:
        engine = MemoryEngine(store, embedder, llm, clock=clock.now,
                              ingest_settings=IngestSettings(workers=4, batch_tokens=1))
        await engine.worker.drain()
        rows = store.read(lambda c: c.execute(
            "SELECT kind, text, count(*) FROM memories WHERE status = 'active' AND role IS DISTINCT FROM 'assistant' "
            "GROUP BY kind, text").fetchall())
        chunks = {t: n for k, t, n in rows if k == "chunk"}
        facts = {t: n for k, t, n in rows if k == "fact"}
        queue_left = store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status <> 'done'").fetchone()[0])
    finally:
        store.close()
    for space, ns in numbers.items():
        for n in ns:
            assert sum(v for t, v in chunks.items() if t.startswith(f"note {space}-{n}:")) == 1, (space, n, chunks)
            assert facts.get(f"The user keeps garden number {n} in {space}") == 1, (space, n, facts)
    assert queue_left == 0
