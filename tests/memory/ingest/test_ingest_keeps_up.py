"""Memory keeps up under sustained load (issue 33): a space's backlog becomes bigger batches, not
a longer queue of calls, and a turn waits for memory while memory is far behind and working.

Found on the soak (30 busy chats on 2 cores): replies went on while memory fell behind and
stayed behind, 1,172 turns pending at the end. Through the real litellm against the fake LLM,
real DuckDB and e5; the waits are on events, never on the clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from memory.engine import MemoryEngine
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.ingest.queue import payload_tokens
from memory.ingest.settings import IngestSettings
from memory.ingest.worker import GROWTH
from tests.fakes import brain
from tests.fakes.llm_server import After
from tests.memory.ingest.test_ingest_batch import is_batch, is_turn, parts, queue


async def test_a_space_far_behind_goes_in_fewer_bigger_calls(store, embedder, llm, fake_llm, clock):
    fake_llm.responder = brain.respond
    queue(store, clock, "amy", 1)
    one_turn = store.read(lambda c: payload_tokens(c.execute("SELECT payload FROM ingest_queue").fetchone()[0]))
    per_space = 4
    engine = MemoryEngine(store, embedder, llm, clock=clock.now,
                          ingest_settings=IngestSettings(per_space=per_space, batch_tokens=per_space * one_turn + 4))
    queue(store, clock, "amy", per_space * GROWTH - 1, start=2)
    assert await engine.worker.drain() == per_space * GROWTH
    calls = [r for r in fake_llm.requests if is_turn(r)]
    # Before: a claim of `per_space` turns and one call each (4 calls); now the claim takes the
    # whole backlog and one call carries it.
    assert len(calls) == 1, [len(c["messages"][1]["content"]) for c in calls]
    assert is_batch(calls[0]) and len(parts(calls[0]["messages"][1]["content"])) == per_space * GROWTH
    assert store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status = 'done'").fetchone()[0]) \
        == per_space * GROWTH


def turn(space: str, n: int, clock) -> CapturedTurn:
    return CapturedTurn(space_id=space, session_id=f"s-{space}", turn_id=f"{space}-{n}", created_at=clock.now(),
                        messages=(TurnMessage("user", f"note {space}-{n}: the orchard row {n} has young pear trees"),
                                  TurnMessage("assistant", f"Noted row {n}.")))


@asynccontextmanager
async def working(engine: MemoryEngine, clock, *, turns: int, release: asyncio.Event) -> AsyncIterator[MemoryEngine]:
    """`engine` with its ingest worker running and `turns` of amy's captured; after the test the
    held model calls are released and the worker stopped."""
    await engine.worker.start()
    try:
        for n in range(turns):
            assert await engine.capture(turn("amy", n, clock))
        yield engine
    finally:
        release.set()
        await engine.worker.stop(drain=False)


async def test_a_turn_waits_while_memory_is_far_behind_and_goes_on_once_it_caught_up(
        store, embedder, llm, fake_llm, clock):
    release = asyncio.Event()
    asked = asyncio.Event()

    async def held() -> None:
        asked.set()
        await release.wait()

    fake_llm.responder = lambda req: After(held, brain.respond(req)) if is_turn(req) else brain.respond(req)
    async with working(MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(
            backlog_max=2, stall_seconds=3600)), clock, turns=5, release=release) as engine:
        await asyncio.wait_for(asked.wait(), 120)        # memory is working on them
        waiting = asyncio.ensure_future(engine.ingest_room())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()                        # 5 turns due, at most 2 allowed: the turn waits
        release.set()
        await asyncio.wait_for(waiting, 120)             # memory caught up: it goes on
        assert engine.worker.backlog <= 2
        await engine.ingest_room()                       # and the next turn does not wait at all


async def test_a_stalled_memory_never_holds_a_turn_back(store, embedder, llm, fake_llm, clock):
    release = asyncio.Event()
    fake_llm.responder = lambda req: After(release.wait, brain.respond(req)) if is_turn(req) else brain.respond(req)
    async with working(MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(
            backlog_max=1, stall_seconds=0.5)), clock, turns=4, release=release) as engine:
        # Memory is stuck on its call (a model that does not answer): no turn is done, so after
        # the stall time the turn goes on instead of waiting for a memory that may never come.
        await asyncio.wait_for(engine.ingest_room(), 120)
        assert engine.worker.backlog > 1


async def test_memory_work_stopped_or_off_never_holds_a_turn_back(store, embedder, llm, fake_llm, clock):
    fake_llm.responder = brain.respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(backlog_max=1))
    for n in range(4):
        assert await engine.capture(turn("amy", n, clock))
    await asyncio.wait_for(engine.ingest_room(), 120)    # no worker running (a one-shot command, a test)
    off = MemoryEngine(store, embedder, llm, clock=clock.now, ingest_settings=IngestSettings(backlog_max=0))
    await off.worker.start()
    try:
        await asyncio.wait_for(off.ingest_room(), 120)  # backlog_max = 0: replies never wait
    finally:
        await off.worker.stop(drain=False)


async def test_the_task_hook_runs_once_per_claim_and_sees_every_turn(store, embedder, llm, fake_llm, clock):
    fake_llm.responder = brain.respond
    engine = MemoryEngine(store, embedder, llm, clock=clock.now)
    seen: list[tuple[str, int]] = []

    async def hook(space: str) -> None:
        done = store.read(lambda c: c.execute(
            "SELECT count(*) FROM ingest_queue WHERE space_id = ? AND status = 'done'", [space]).fetchone()[0])
        seen.append((space, done))

    engine.worker.on_ingested = hook
    queue(store, clock, "amy", 6)
    assert await engine.worker.drain() == 6
    assert seen == [("amy", 6)], json.dumps(seen)
