"""[agent] turn_timeout bounds a turn until its answer starts being written (issue 30 item 2): a
slow model's answer the person watches grow is not cut off for time and replaced by an apology
(seen with llama.cpp on a busy CPU: SmolLM2 writing 1,024 tokens at 8 tokens/s was cut at 120 s,
tests/bot/cli/test_real_model.py), while a model that has not started answering still gets the
person an apology in time."""

from __future__ import annotations

import asyncio

import pytest

from bot.app import build_app
from bot.config import load_settings
from memory import prompts
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import After, Streamed
from tests.reliability.procs import is_reply_request

pytestmark = pytest.mark.timeout(300)

TURN_TIMEOUT = 5.0
QUESTION = "what is my dog called?"


def asked(req: dict) -> bool:
    return is_reply_request(req) and req["messages"][-1].get("content") == QUESTION


def app_for(tmp_path, fake_llm, clock, channel):
    settings = load_settings(None, env={
        "MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_LLM_API_BASE": fake_llm.base_url,
        "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
        "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_AGENT_TURN_TIMEOUT": str(TURN_TIMEOUT)})
    return build_app(settings, channels=[channel], clock=clock.now)


async def warmed(app, channel) -> None:
    """The first model call in a process loads what it needs (litellm, its HTTP client: 30 s on a
    busy machine), longer than the short turn_timeout these tests use: made once first, then one
    turn (the first also loads the embedder)."""
    await app.warmed_up()
    await app.llm.complete([{"role": "user", "content": "hello"}], purpose="reply")
    await channel.say("alice", "hello")
    await channel.wait_for(1, timeout=120)
    await app.gateway.idle()


async def test_an_answer_being_written_is_not_cut_by_the_turn_timeout(tmp_path, fake_llm, clock):
    loop = asyncio.get_running_loop()
    said: list[float] = []

    async def hold(i: int) -> None:
        # The rest of the answer comes once the turn is older than its timeout: the first words
        # came in time, the whole answer did not.
        await asyncio.sleep(max(0.0, said[0] + 2 * TURN_TIMEOUT - loop.time()))

    fake_llm.responder = lambda req: (Streamed(("The dog ", "is named ", "Brindlequix."), hold=hold)
                                      if asked(req) else brain.respond(req))
    channel = RecordingChannel("console")
    async with app_for(tmp_path, fake_llm, clock, channel) as app:
        await warmed(app, channel)
        said.append(loop.time())
        await channel.say("alice", QUESTION)
        await channel.wait_for(2, timeout=120)
        await app.gateway.idle()
    assert channel.sent[1].text == "The dog is named Brindlequix."


async def test_an_answer_not_started_within_the_turn_timeout_gets_the_apology(tmp_path, fake_llm, clock):
    release = asyncio.Event()
    fake_llm.responder = lambda req: (After(release.wait, "The dog is named Brindlequix.")
                                      if asked(req) else brain.respond(req))
    channel = RecordingChannel("console")
    async with app_for(tmp_path, fake_llm, clock, channel) as app:
        await warmed(app, channel)
        await channel.say("alice", QUESTION)
        await channel.wait_for(2, timeout=120)
        release.set()
        await app.gateway.idle()
    apology = prompts.TIMEOUT_APOLOGY.format(address=fake_llm.base_url)
    assert channel.sent[1].text == apology, channel.sent[1].text
