"""The gate with the real LiteLLM against a fake OpenAI-compatible server that serves one request
at a time (tests/fakes/paced_llm.py), and the timeouts that follow the measured speed (issue 30)."""

from __future__ import annotations

import asyncio
import json

import pytest

from memory.errors import ModelStopped
from memory.llm import LiteLLM, LLMSettings
from memory.llm_gate import MEMORY, GatePolicy, ModelGate
from memory.llm_pace import Pace
from tests.fakes.llm_server import After
from tests.fakes.paced_llm import PacedLLM
from tests.reliability.procs import until

ANSWER = json.dumps({"ok": True})
REPLY_SYSTEM = "You are memgate, replying."


def is_reply(body: dict) -> bool:
    return body.get("messages", [{}])[0].get("content") == REPLY_SYSTEM


def llms(server: PacedLLM, gate: ModelGate | None, **memory_settings) -> tuple[LiteLLM, LiteLLM]:
    """(the reply LLM: streamed, no retry of an outage; the memory LLM), sharing `gate`."""
    reply = LiteLLM(LLMSettings(model="openai/fake-model", api_base=server.base_url, retries=0,
                                first_token_timeout=30.0, retry_outages=False), gate=gate)
    memory = LiteLLM(LLMSettings(model="openai/fake-model", api_base=server.base_url, retries=0,
                                 **memory_settings), gate=gate)
    return reply, memory


def said(text: str, system: str = "Extract the facts as JSON.") -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


async def test_a_reply_is_served_before_the_memory_calls_queued_ahead_of_it() -> None:
    # Issue 30: the first reply waited behind background memory calls on a one-slot server.
    release = asyncio.Event()
    respond = lambda body: "Hello there." if is_reply(body) else After(release.wait, ANSWER)  # noqa: E731
    async with PacedLLM(slots=1, rate=1000, responder=respond) as server:
        reply_llm, memory_llm = llms(server, ModelGate("fake", GatePolicy(slots=1)))
        memory = [asyncio.create_task(memory_llm.complete(said(f"turn {i}"), purpose="ingest", json_mode=True))
                  for i in range(3)]
        await until(lambda: any(s.started for s in server.served), "the first memory call in the server's slot")
        reply = asyncio.create_task(reply_llm.complete(said("hi", REPLY_SYSTEM), purpose="reply"))
        # Bounded only to turn a hang (the reply queued behind the held memory calls) into a failure.
        assert (await asyncio.wait_for(reply, 120)).content == "Hello there."
        release.set()
        assert [c.content for c in await asyncio.gather(*memory)] == [ANSWER] * 3
    kinds = ["reply" if is_reply(s.body) else "memory" for s in server.served]
    assert kinds[:2] == ["memory", "reply"] and server.served[0].cancelled   # the first cut, then redone
    assert kinds.count("memory") == 4 and sum(1 for s in server.served if s.ended and not s.cancelled) == 4
    assert memory_llm.usage.failures == {} and memory_llm.usage.calls == {"ingest": 3}


async def test_time_waiting_in_the_gate_does_not_count_against_a_calls_timeout() -> None:
    # A queued call is not a silent server: the memory call waits behind a reply that takes far
    # longer than the memory call's own 1 s timeout, then succeeds.
    release = asyncio.Event()
    respond = lambda body: After(release.wait, "Hello there.") if is_reply(body) else ANSWER  # noqa: E731
    async with PacedLLM(slots=1, rate=1000, responder=respond) as server:
        reply_llm, memory_llm = llms(server, ModelGate("fake", GatePolicy(slots=1)), timeout=1.0)
        reply = asyncio.create_task(reply_llm.complete(said("hi", REPLY_SYSTEM), purpose="reply"))
        await until(lambda: any(s.started for s in server.served), "the reply in the server's slot")
        memory = asyncio.create_task(memory_llm.complete(said("turn"), purpose="ingest", json_mode=True))
        await asyncio.sleep(2.5)   # the memory call has now waited past its own timeout
        release.set()
        assert (await reply).content == "Hello there."
        assert (await memory).content == ANSWER
    assert memory_llm.usage.failures == {}


async def test_a_slow_servers_long_answer_gets_the_time_its_measured_speed_needs() -> None:
    # 20 tokens/s: the second answer (~75 tokens, ~4 s) is past the configured 2 s timeout, which
    # cut it before; measured on the first call, the endpoint's memory timeout is long enough.
    answers = iter(["short answer here", "x" * 300])
    async with PacedLLM(slots=1, rate=20, responder=lambda body: next(answers)) as server:
        gate = ModelGate("fake", GatePolicy(slots=1))
        _, memory_llm = llms(server, gate, timeout=2.0)
        await memory_llm.complete(said("first"), purpose="ingest", max_tokens=10)
        assert gate.pace.answer_rate is not None
        assert (await memory_llm.complete(said("second"), purpose="ingest", max_tokens=100)).content == "x" * 300


async def test_a_long_prompt_gets_the_first_token_time_the_measured_prompt_speed_needs() -> None:
    # The server reads 500 prompt tokens/s: a 2,000-token prompt takes ~4 s to its first token,
    # past the configured 1 s; measured on a short prompt first, the limit follows the speed.
    async with PacedLLM(slots=1, rate=1000, prompt_rate=500, responder=lambda body: "Hello.") as server:
        gate = ModelGate("fake", GatePolicy(slots=1))
        reply_llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=server.base_url, retries=0,
                                        first_token_timeout=1.0, retry_outages=False), gate=gate)
        await reply_llm.complete(said("w " * 200, REPLY_SYSTEM), purpose="reply")
        assert gate.pace.prompt_rate is not None
        assert (await reply_llm.complete(said("word " * 1600, REPLY_SYSTEM), purpose="reply")).content == "Hello."


async def test_closing_the_gate_to_memory_cuts_the_call_in_flight_and_makes_no_new_one() -> None:
    never = asyncio.Event()
    async with PacedLLM(slots=1, rate=1000, responder=lambda body: After(never.wait, ANSWER)) as server:
        gate = ModelGate("fake", GatePolicy(slots=1))
        _, memory_llm = llms(server, gate)
        call = asyncio.create_task(memory_llm.complete(said("turn"), purpose="ingest"))
        await until(lambda: any(s.started for s in server.served), "the memory call in the server's slot")
        gate.close(MEMORY)
        with pytest.raises(ModelStopped):
            await call
        with pytest.raises(ModelStopped):
            await memory_llm.complete(said("another"), purpose="ingest")
        await until(lambda: server.served[0].cancelled, "the server saw the client go")
    assert len(server.served) == 1 and memory_llm.usage.failures == {}


def test_timeouts_follow_the_measured_speeds_and_never_go_below_the_configured_ones() -> None:
    pace = Pace()
    assert pace.call_timeout(60.0, 1000, 1024) == 60.0 and pace.first_token_timeout(30.0, 1000) == 30.0
    pace.observe(prompt_tokens=1000, answer_tokens=200, total_s=12.0, first_token_s=2.0)   # 500/s in, 20/s out
    assert pace.prompt_rate == 500 and pace.answer_rate == 20
    assert pace.call_timeout(60.0, 1000, 1024) == pytest.approx(2 * (1000 / 500 + 1024 / 20) + 5)
    assert pace.call_timeout(60.0, 10, 10) == 60.0                   # a fast call keeps the floor
    assert pace.first_token_timeout(30.0, 20_000) == pytest.approx(2 * 20_000 / 500 + 5)
    assert pace.first_token_timeout(30.0, 100) == 30.0
    pace.observe(prompt_tokens=1000, answer_tokens=100, total_s=7.0, first_token_s=None)    # whole: 2 s reading
    assert pace.answer_rate == pytest.approx(20)
