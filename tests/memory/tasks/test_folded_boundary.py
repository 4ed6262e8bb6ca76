"""The task-boundary verdict folded into the ingest call (issue 13).

Found: after the ingest call, the task processor asked TASK_BOUNDARY_SYSTEM again about the same
turn (0.9 calls a turn). Now the ingest call answers SAME / NEW when the rules cannot decide; the
verdict is stored with the turn's rows and used by `assign`. The separate judge stays as the
fallback for turns without one. Through the real litellm against the fake LLM, real DuckDB and
e5; the scripted episodes are those of bench/task_cost.py.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import timedelta

import pytest

from bench import task_cost
from memory import prompts
from memory.engine import MemoryEngine
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.ingest.settings import IngestSettings
from memory.llm import LiteLLM, LLMSettings
from memory.store.connection import Store
from memory.tasks.processor import TaskProcessor
from tests.fakes import brain

def folded_responder(req: dict) -> str:
    """bench/task_cost.py's model (it answers the ingest call too, with the same judge on what the
    prompt shows); the separate judge must not be asked."""
    if req["messages"][0]["content"].startswith(prompts.TASK_BOUNDARY_SYSTEM[:40]):
        raise AssertionError("the separate judge was asked although the ingest call answered")
    return task_cost.responder(req)


def membership(store: Store) -> list[tuple[str, list[str]]]:
    """Each task (oldest first): its status and the first words of its user messages, in order."""
    rows = store.read(lambda c: c.execute(
        """SELECT t.status, list(m.text ORDER BY m.created_at) FILTER (WHERE m.role = 'user')
           FROM tasks t JOIN memories m ON m.task_id = t.id AND m.kind = 'chunk'
           GROUP BY t.id, t.status, t.started_at ORDER BY t.started_at""").fetchall())
    # NFKC: ingest stores normalised text (full-width punctuation folded), the bench stores it raw.
    return [(status, [" ".join(unicodedata.normalize("NFKC", t).split()[:6]) for t in texts or []])
            for status, texts in rows]


async def separate_judge_tasks(tmp_path, embedder, clock, base_url: str) -> list:
    """The episodes as bench/task_cost.py runs them: chunks stored directly, the judge asked."""
    with Store(tmp_path / "separate.duckdb", embedder.dim) as store:
        llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=base_url, retries=0, timeout=30))
        proc = TaskProcessor(store, embedder, llm, clock=clock.now)
        for ep in task_cost.EPISODES:
            for i, (user, answer) in enumerate(ep.turns):
                at = ep.start + timedelta(minutes=3 * i)
                clock.set(at)
                task_cost.store_turn(store, embedder, user, answer, at, ep.session)
                await proc.assign(task_cost.SPACE)
        clock.advance(hours=3)
        await proc.close_idle()
        assert llm.usage.calls.get("task_boundary", 0) > 0  # this path does ask the judge
        return membership(store)


async def folded_tasks(tmp_path, embedder, clock, base_url: str, *, batched: bool) -> tuple[list, LiteLLM]:
    """The same episodes through capture and the real ingest worker, the verdict in its call.
    `batched`: each episode's turns are queued before one drain, so they share calls."""
    with Store(tmp_path / f"folded-{batched}.duckdb", embedder.dim) as store:
        llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=base_url, retries=0, timeout=30))
        engine = MemoryEngine(store, embedder, llm, clock=clock.now)
        proc = TaskProcessor(store, embedder, llm, clock=clock.now)
        engine.worker.on_ingested, engine.worker.task_gap = proc.assign, proc.settings.idle_gap
        for e, ep in enumerate(task_cost.EPISODES):
            for i, (user, answer) in enumerate(ep.turns):
                at = ep.start + timedelta(minutes=3 * i)
                clock.set(at)
                await engine.capture(CapturedTurn(
                    space_id=task_cost.SPACE, session_id=ep.session, turn_id=f"e{e}-{i}", created_at=at,
                    messages=(TurnMessage("user", user), TurnMessage("assistant", answer))))
                if not batched:
                    await engine.worker.drain()
            await engine.worker.drain()
        clock.advance(hours=3)
        await proc.close_idle()
        left = store.read(lambda c: c.execute("SELECT count(*) FROM turn_boundaries").fetchone()[0])
        assert left == 0  # every stored verdict was used once and dropped with its assignment
        return membership(store), llm


async def test_the_folded_verdict_gives_the_same_tasks_as_the_separate_judge(tmp_path, embedder, clock, fake_llm):
    fake_llm.responder = task_cost.responder
    expected = await separate_judge_tasks(tmp_path, embedder, clock, fake_llm.base_url)
    assert [s for s, _ in expected].count("completed") == 5  # the bench's five summarised tasks
    fake_llm.responder = folded_responder
    got, llm = await folded_tasks(tmp_path, embedder, clock, fake_llm.base_url, batched=False)
    assert got == expected
    assert "task_boundary" not in llm.usage.calls
    asked = [r for r in fake_llm.requests if "CURRENT TASK" in r["messages"][-1]["content"]]
    assert asked, "the ingest call was never asked for a verdict"


async def test_the_folded_verdict_in_batched_calls_gives_the_same_tasks(tmp_path, embedder, clock, fake_llm):
    fake_llm.responder = task_cost.responder
    expected = await separate_judge_tasks(tmp_path, embedder, clock, fake_llm.base_url)
    fake_llm.responder = folded_responder
    got, llm = await folded_tasks(tmp_path, embedder, clock, fake_llm.base_url, batched=True)
    assert got == expected
    assert any(prompts.TURN_BATCH_NOTE in r["messages"][0]["content"] for r in fake_llm.requests)
    assert "task_boundary" not in llm.usage.calls


@pytest.mark.parametrize("given", ["left out", "malformed"])
async def test_without_a_verdict_the_rules_decide_and_no_second_call_is_made(tmp_path, embedder, clock, fake_llm, given):
    """Issue 33: the model answered the facts and left the verdict out (or gave one that is neither
    SAME nor NEW), and the task processor asked its own judge for every turn (2,130 memory calls
    plus 1,950 judge calls for 1,980 turns). Now the rules decide SAME: one memory call per turn,
    and the turn keeps its titles and facts."""
    def respond(req: dict) -> str:
        system, user = req["messages"][0]["content"], req["messages"][1]["content"]
        if system.startswith(prompts.TURN_SYSTEM[:40]):
            answer = brain.turn_answer(user)
            answer.pop("task", None)
            if "CURRENT TASK" in user and given == "malformed":
                answer["task"] = {"verdict": "MAYBE", "confidence": 2}
            return json.dumps(answer)
        if system.startswith(prompts.TASK_BOUNDARY_SYSTEM[:40]):
            return json.dumps({"verdict": "NEW", "confidence": 0.9})
        return task_cost.responder(req)

    fake_llm.responder = respond
    with Store(tmp_path / "m.duckdb", embedder.dim) as store:
        llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, retries=0, timeout=30))
        engine = MemoryEngine(store, embedder, llm, clock=clock.now)
        proc = TaskProcessor(store, embedder, llm, clock=clock.now)
        engine.worker.on_ingested, engine.worker.task_gap = proc.assign, proc.settings.idle_gap
        texts = ["I back up my PostgreSQL database every night with pg_dump.",
                 "We adopted a grey kitten on Saturday and named her Earl Grey.",
                 "The kitten sleeps on my keyboard while the backup runs."]
        for i, text in enumerate(texts):
            await engine.capture(CapturedTurn(space_id="u:a", session_id="s", turn_id=f"t{i}", created_at=clock.now(),
                                              messages=(TurnMessage("user", text), TurnMessage("assistant", "Sure."))))
            await engine.worker.drain()
            clock.advance(minutes=2)
        asked = [r for r in fake_llm.requests if r["messages"][0]["content"].startswith(prompts.TURN_SYSTEM[:40])
                 and "CURRENT TASK" in r["messages"][-1]["content"]]
        assert len(asked) == 2  # the verdict was asked for the second and third turns
        assert "task_boundary" not in llm.usage.calls
        assert llm.usage.calls == {"ingest": 3}  # one memory call per turn
        assert [len(m) for _, m in membership(store)] == [3]  # SAME: one task
        left = store.read(lambda c: c.execute("SELECT count(*) FROM turn_boundaries").fetchone()[0])
        assert left == 0
        facts = store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE kind = 'fact'").fetchone()[0])
        assert facts == 3  # the missing verdict cost the turns nothing else


async def test_a_turn_stored_raw_is_still_judged_by_the_separate_call(tmp_path, embedder, clock, fake_llm):
    """The judge stays the fallback for a turn whose ingest call failed (no answer at all)."""
    def respond(req: dict) -> str:
        system = req["messages"][0]["content"]
        if system.startswith(prompts.TURN_SYSTEM[:40]):
            return "no JSON here" if "kitten" in req["messages"][1]["content"] else json.dumps(
                brain.turn_answer(req["messages"][1]["content"]))
        if system.startswith(prompts.TASK_BOUNDARY_SYSTEM[:40]):
            return json.dumps({"verdict": "NEW", "confidence": 0.9})
        return task_cost.responder(req)

    fake_llm.responder = respond
    with Store(tmp_path / "m.duckdb", embedder.dim) as store:
        llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, retries=0, timeout=30))
        engine = MemoryEngine(store, embedder, llm, clock=clock.now,
                              ingest_settings=IngestSettings(max_attempts=1))
        proc = TaskProcessor(store, embedder, llm, clock=clock.now)
        engine.worker.on_ingested, engine.worker.task_gap = proc.assign, proc.settings.idle_gap
        for i, text in enumerate(["I back up my PostgreSQL database every night with pg_dump.",
                                  "We adopted a grey kitten on Saturday and named her Earl Grey."]):
            await engine.capture(CapturedTurn(space_id="u:a", session_id="s", turn_id=f"t{i}", created_at=clock.now(),
                                              messages=(TurnMessage("user", text), TurnMessage("assistant", "Sure."))))
            await engine.worker.drain()
            clock.advance(minutes=2)
        await proc.assign("u:a")  # a turn stored raw is assigned with the space's next turn or close
        assert llm.usage.calls.get("task_boundary") == 1
        assert [len(m) for _, m in membership(store)] == [1, 1]  # the judge's NEW split them
