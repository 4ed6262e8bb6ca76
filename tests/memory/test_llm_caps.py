"""Bounded LLM answers: a 2 MB answer that fails its schema is not sent back whole in the repair
round, and a memory LLM that returns hundreds of facts for one turn stores at most the cap."""

from __future__ import annotations

import json

from pydantic import BaseModel

from memory import prompts
from memory.engine import MemoryEngine
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.ingest.settings import IngestSettings
from memory.llm_json import REPAIR_ECHO_CHARS, complete_json
from tests.fakes import brain


class Answer(BaseModel):
    verdict: str


async def test_a_2mb_answer_is_echoed_bounded_in_the_repair_round(llm, fake_llm):
    junk = "not json at all " * 131_072  # 2 MB
    fake_llm.script(junk, json.dumps({"verdict": "SAME"}))
    got = await complete_json(llm, "system", "user", Answer, purpose="test")
    assert got.verdict == "SAME"
    repair = fake_llm.requests[1]["messages"]
    assert sum(len(m["content"]) for m in repair) < REPAIR_ECHO_CHARS + 2000
    assert repair[2]["role"] == "assistant" and repair[2]["content"].startswith("not json at all")


async def test_four_hundred_facts_in_one_turn_store_at_most_the_cap(store, embedder, llm, fake_llm, clock, tmp_path):
    def respond(req):
        system = req["messages"][0]["content"]
        if system.startswith(prompts.TURN_SYSTEM[:40]):
            facts = [{"text": f"fact number {i} about the person", "category": "about_you", "tags": ["x"],
                      "intent": "statement", "from": [1]} for i in range(400)]
            return json.dumps({"titles": {}, "dedup": [], "facts": facts})
        return brain.respond(req)

    fake_llm.responder = respond
    engine = MemoryEngine(store, embedder, llm, data_dir=tmp_path, clock=clock.now,
                          ingest_settings=IngestSettings(max_facts_per_turn=12))
    await engine.ensure_space("u:a", "user")
    await engine.capture(CapturedTurn("u:a", "s1", "t1", clock.now(), (TurnMessage("user", "I told you a lot today."),)))
    await engine.worker.drain()
    facts = store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE kind = 'fact'").fetchone()[0])
    assert facts == 12
