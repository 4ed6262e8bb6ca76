"""Recall abstains when nothing in memory is about the message (issue 32 item 2): ranked scores
are min-max normalised, so the top hit is always 1.0 and something was always injected ("猫"
returned "Hi! My name is Tom Becker." at 1.0). The calibrated confidence (memory/recall/
calibration.py) is absolute: a message memory has nothing on injects nothing, one it holds the
answer to still finds it. Real store (both backends), real e5 embedder."""

from __future__ import annotations

from memory.engine import MemoryEngine
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.recall import calibration
from memory.recall.search import MemoryHit, RecallSettings, confident
from tests.memory.test_engine import chat

LINES = [("Hi! My name is Tom Becker.", "Nice to meet you, Tom."),
         ("I work as a nurse at the children's hospital in Leeds.", "That sounds demanding."),
         ("My sister Anna is getting married in June.", "Congratulations to her!"),
         ("I'm training for a half marathon, running 30 km a week.", "Good luck with it.")]


async def test_a_message_memory_has_nothing_on_injects_nothing(store, embedder, clock, tmp_path):
    assert calibration.calibrated(embedder.name)  # the shipped weights are for the test's embedder
    engine = MemoryEngine(store, embedder, None, data_dir=tmp_path, clock=clock.now,
                          recall_settings=RecallSettings(min_confidence=calibration.LEARNED_THRESHOLD))
    await chat(engine, clock, "u:tom", "s1", LINES)
    for unrelated in ("猫", "What is the capital of Peru?", "推荐一家北京的烤鸭店"):
        hits = await engine.search(unrelated, ["u:tom"])
        assert hits and hits[0].score == 1.0  # the relative score says nothing
        assert hits[0].confidence is not None and hits[0].confidence < calibration.LEARNED_THRESHOLD, (unrelated, hits[0])
        block, shown = await engine.recall_block(unrelated, ["u:tom"])
        assert block == "" and shown == [], unrelated  # the agent is told nothing matched (prompts.NO_MEMORY_HINT)
    for asked, said in (("Where does Tom work?", "nurse at the children's hospital"),
                        ("When is Anna's wedding?", "married in June"),
                        ("how far do I run each week", "half marathon")):
        block, shown = await engine.recall_block(asked, ["u:tom"])
        assert said in block, (asked, [(h.text, h.confidence) for h in shown])


def test_abstaining_is_the_querys_decision_not_a_cut_through_its_hits():
    def hit(conf: float | None) -> MemoryHit:
        return MemoryHit(id="c", kind="chunk", space_id="u", title="", text="t", score=1.0, created_at=None, confidence=conf)

    assert not confident([], 0.0)
    assert confident([hit(0.9), hit(0.01)], 0.15)  # the best hit decides for the block
    assert not confident([hit(0.1), hit(0.9)], 0.15)
    assert confident([hit(None)], 0.15)  # an embedder without calibration never abstains
    assert confident([hit(0.01)], 0.0)  # 0 = never abstain
