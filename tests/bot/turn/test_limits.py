"""Caps on one turn: a huge message is stored whole but the model reads a bounded start of it; a
huge LLM reply is cut at a boundary with a note before it is sent (and, cut, not kept); both ingest with
bounded embedding work (DESIGN section 7 findings: 1 MB messages, 300k-char replies)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from bot.app import build_app
from bot.config import load_settings
from bot.turn.limits import REPLY_CUT_NOTE, cap_message, cap_reply, cut_at_boundary
from memory import prompts
from memory.text import normalize
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel

TEXT = st.text(alphabet=st.sampled_from(list("ab .\n`我。?!")), max_size=400)


@given(TEXT, st.integers(8, 300))
def test_cut_is_a_bounded_start_with_balanced_fences(text, limit):
    cut = cut_at_boundary(text, limit)
    assert len(cut) <= limit
    body = cut.removesuffix("\n```") if len(text) > limit else cut
    assert text.startswith(body)
    if len(text) > limit:
        assert cut.count("```") % 2 == 0
    else:
        assert cut == text


@given(TEXT, st.integers(500, 2000))
def test_cap_reply_fits_the_limit_and_says_it_cut(text, limit):
    text = text * 10
    out = cap_reply(text, limit)
    assert len(out) <= limit
    assert out == text or out.endswith(REPLY_CUT_NOTE.format(limit=limit))


def test_cap_message_keeps_short_text_and_says_how_much_is_left():
    assert cap_message("hello", 100) == "hello"
    long = "word " * 1000
    out = cap_message(long, 300)
    assert out.startswith("word word") and "more characters" in out and len(out) < 450


HUGE_REPLY = ("Here is the plan. " * 20_000)[:300_000]


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_huge_message_and_huge_reply_are_bounded_for_the_model_and_the_channel_and_the_message_stored_whole(
        tmp_path, fake_llm, clock):
    def respond(req):
        system = req["messages"][0]["content"]
        if system.startswith("You are memgate"):
            return HUGE_REPLY
        return brain.respond(req)

    fake_llm.responder = respond
    settings = load_settings(None, env={
        "MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64",
        "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
        "MEMGATE_AGENT_MAX_MESSAGE_CHARS": "5000", "MEMGATE_AGENT_MAX_REPLY_CHARS": "8000",
        # Small pieces keep the test quick on a busy machine; the bound is what is tested.
        "MEMGATE_MEMORY_EMBED_PIECE_CHARS": "300", "MEMGATE_MEMORY_EMBED_MAX_PIECES": "2"})
    channel = RecordingChannel("console")
    app = build_app(settings, channels=[channel], clock=clock.now)
    huge = "My bees live on the roof. " * 12_000  # 312k characters
    async with app:
        await channel.say("alice", huge)
        await channel.wait_for(1, timeout=120)
        await app.gateway.idle()
        await app.engine.worker.drain()
        reply_req = [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You are memgate")][0]
        turn_req = [r for r in fake_llm.requests if r["messages"][0]["content"].startswith(prompts.TURN_SYSTEM[:40])]
        stored = dict(app.store.read(lambda c: c.execute(
            "SELECT role, text FROM memories WHERE kind = 'chunk'").fetchall()))
    sent = channel.sent[0].text
    user_content = reply_req["messages"][-1]["content"]
    assert len(user_content) < 5200 and "more characters" in user_content
    assert len(sent) <= 8000 and sent.endswith(REPLY_CUT_NOTE.format(limit=8000))
    assert stored["user"] == normalize(huge)       # the person's words, whole
    # A reply cut for length is shown, not kept as memory (issue 32 item 5: the bot's own broken
    # replies were recalled first); the turn's memory is the person's words.
    assert "assistant" not in stored
    assert turn_req and all(len(m["content"]) < 20_000 for r in turn_req for m in r["messages"])
