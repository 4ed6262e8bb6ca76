"""LLM faults through the whole bot (real gateway, agent, litellm, DuckDB, the fake LLM server):
a 500, a 429 with Retry-After, a reply that times out, a memory model answering bad JSON, and
a huge answer. Whatever the model does, every message is answered (at worst with an apology)
and what the person said is stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bot.app import build_app
from bot.config import load_settings
from memory.llm import retry_after_seconds
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import Delay, FakeError, FakeLLM, Script
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import is_reply_request, stored_user_texts, tally

pytestmark = pytest.mark.timeout(600)

MESSAGES = ("I grow tomatoes on my balcony in Graz.", "My favourite composer is Janacek.")
RETRY_AFTER = 1.5


async def run_turns(tmp: Path, name: str, reply: Callable[[dict, int], Script] | None = None,
                    memory: Callable[[dict], Script] | None = None, **env: str) -> tuple[Counts, FakeLLM, list[str]]:
    """Say MESSAGES to the bot, with the agent's reply calls (n = call number, from 1) and the
    memory model's calls answered by the given scripts; count what came back and what was stored.
    Returns the counts, the fake (its requests) and the reply texts in order."""
    calls = {"reply": 0}

    def respond(req: dict) -> Script:
        if is_reply_request(req):
            calls["reply"] += 1
            if reply is not None:
                return reply(req, calls["reply"])
        elif memory is not None:
            return memory(req)
        return brain.respond(req)

    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "none.toml").write_text("")
    async with FakeLLM(responder=respond) as llm:
        base = {"MEMGATE_DATA_DIR": str(tmp / "data"), "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model",
                "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_DM_POLICY": "open",
                "MEMGATE_CONFIG": str(tmp / "none.toml")}
        base.update(env)
        channel = RecordingChannel("console")
        app = build_app(load_settings(None, env=base), channels=[channel])
        async with app:
            said = [await channel.say("dora", text) for text in MESSAGES]
            await channel.wait_for(len(MESSAGES), timeout=300)
            await app.gateway.idle()
            await app.engine.worker.drain()
        answers = {m.text: sum(1 for r in channel.sent if r.reply_to == m.message_id and r.text.strip()) for m in said}
        texts = [r.text for r in channel.sent]
    return tally(name, list(MESSAGES), answers, stored_user_texts(tmp / "data")), llm, texts


@scenario("llm: 500 on the first reply call, then answers")
async def llm_500(tmp: Path) -> Counts:
    counts, _, texts = await run_turns(tmp, "llm: 500 on the first reply call, then answers",
                                       reply=lambda req, n: FakeError(500, "overloaded") if n == 1 else brain.respond(req),
                                       MEMGATE_LLM_RETRIES="2")
    return counts


@scenario("llm: 429 with Retry-After")
async def llm_429(tmp: Path) -> Counts:
    counts, _, _ = await _llm_429(tmp)
    return counts


async def _llm_429(tmp: Path):
    return await run_turns(tmp, "llm: 429 with Retry-After",
                           reply=lambda req, n: FakeError(429, "slow down", retry_after=RETRY_AFTER) if n == 1
                           else brain.respond(req), MEMGATE_LLM_RETRIES="1")


@scenario("llm: reply times out")
async def llm_timeout(tmp: Path) -> Counts:
    counts, _, _ = await run_turns(tmp, "llm: reply times out",
                                   reply=lambda req, n: Delay(60, brain.respond(req)), MEMGATE_LLM_TIMEOUT="0.5")
    return counts


@scenario("llm: memory model answers bad JSON")
async def llm_bad_json(tmp: Path) -> Counts:
    counts, _, _ = await run_turns(tmp, "llm: memory model answers bad JSON", memory=lambda req: "{not json at all")
    return counts


@scenario("llm: huge answer")
async def llm_huge(tmp: Path) -> Counts:
    huge = "All of this is the answer. " * 20_000  # ~540k characters
    counts, _, _ = await run_turns(tmp, "llm: huge answer", reply=lambda req, n: huge)
    return counts


@pytest.mark.parametrize("run", [llm_500, llm_timeout, llm_bad_json, llm_huge])
async def test_llm_faults_lose_nothing(tmp_path: Path, run) -> None:
    assert_safe(await run(tmp_path))


async def test_a_429_retry_waits_what_the_server_asked(tmp_path: Path) -> None:
    counts, llm, texts = await _llm_429(tmp_path)
    assert_safe(counts)
    reply_times = [t for r, t in zip(llm.requests, llm.request_times) if is_reply_request(r)]
    # Our own backoff would retry after ~1 s (backoff 1.0 x jitter 0.5-1.5); the server asked 1.5 s.
    # A lower bound only: the retry cannot come sooner, however busy the machine.
    assert reply_times[1] - reply_times[0] >= RETRY_AFTER
    assert not any("not answering" in t for t in texts)


def test_retry_after_is_read_in_seconds_milliseconds_or_as_a_date() -> None:
    class Exc(Exception):
        def __init__(self, headers):
            super().__init__("x")
            self.litellm_response_headers = headers

    assert retry_after_seconds(Exc({"retry-after": "7"})) == 7.0
    assert retry_after_seconds(Exc({"retry-after-ms": "250"})) == 0.25
    assert retry_after_seconds(Exc({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0  # in the past
    assert retry_after_seconds(Exc({"retry-after": "soon"})) is None
    assert retry_after_seconds(Exc({})) is None
    assert retry_after_seconds(ValueError("no headers")) is None
