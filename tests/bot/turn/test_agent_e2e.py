"""The whole turn through the real gateway, agent, litellm and DuckDB, against the fake LLM
server: memory across sessions and days, tool round trips, isolation, ordering, parallelism."""

from __future__ import annotations

import json

import pytest

from bot.app import build_app
from bot.config import load_settings
from memory.text import MEMORY_OPEN
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import Delay, ToolCall


@pytest.fixture
def settings_for(tmp_path, fake_llm):
    def make(**env):
        base = {"MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64",
                "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test"}
        base.update(env)
        return load_settings(tmp_path / "none.toml" if False else None, env=base)
    return make


@pytest.fixture
async def bot(settings_for, fake_llm, clock, embedder):
    fake_llm.responder = brain.respond
    channel = RecordingChannel("console")
    app = build_app(settings_for(), channels=[channel], clock=clock.now, embedder=embedder)
    async with app:
        yield app, channel


def reply_requests(fake_llm):
    return [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You are memgate")]


async def test_allergy_told_in_chinese_is_recalled_days_later_in_a_new_session(bot, fake_llm, clock):
    app, ch = bot
    await ch.say("alice", "我对花生过敏，吃了会很难受。")
    await ch.wait_for(1)
    await app.gateway.idle()
    await app.engine.worker.drain()
    clock.advance(days=2)  # day 3: the session has long expired
    await ch.say("alice", "推荐一个零食")
    await ch.wait_for(2)
    req = reply_requests(fake_llm)[-1]
    system = req["messages"][0]["content"]
    assert MEMORY_OPEN in system and "花生" in system.split(MEMORY_OPEN, 1)[1]
    # A new session: yesterday's turns are not in the prompt history, only in memory.
    assert [m["role"] for m in req["messages"]] == ["system", "user"]
    # No feedback loop: nothing captured contains our memory block.
    payloads = app.store.read(lambda c: c.execute("SELECT payload FROM ingest_queue").fetchall())
    assert payloads and all(MEMORY_OPEN not in p for (p,) in payloads)
    await app.engine.worker.drain()
    texts = app.store.read(lambda c: c.execute("SELECT text FROM memories").fetchall())
    assert all(MEMORY_OPEN not in t for (t,) in texts)


async def test_tool_round_trip(bot, fake_llm):
    app, ch = bot
    await app.engine.remember("Alice's bike is a blue Brompton", "unused")  # another space: must stay invisible
    await ch.say("alice", "/remember my bike is a red Brompton")
    await ch.wait_for(1)
    fake_llm.script(ToolCall("memory_search", {"query": "bike"}), "Your bike is a red Brompton.")
    await ch.say("alice", "what bike do I have?")
    await ch.wait_for(2)
    assert ch.texts()[-1] == "Your bike is a red Brompton."
    second = reply_requests(fake_llm)[-1]
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool"
    results = json.loads(tool_msg["content"])["results"]
    assert any("red Brompton" in r["text"] for r in results)
    assert not any("blue" in r["text"] for r in results)
    # The memory tool's result is not captured as a memory (it is one already).
    await app.gateway.idle()
    payload = app.store.read(lambda c: c.execute("SELECT payload FROM ingest_queue ORDER BY created_at DESC LIMIT 1").fetchone()[0])
    assert [m["role"] for m in json.loads(payload)["messages"]] == ["user", "assistant"]


async def test_two_people_never_see_each_others_memories(bot, fake_llm):
    app, ch = bot
    await ch.say("alice", "/remember my secret project is called Bluebird")
    await ch.say("bob", "/remember I collect stamps")
    await ch.wait_for(2)
    await ch.say("bob", "/memory Bluebird project")
    await ch.wait_for(3)
    assert "Bluebird" not in ch.texts("bob")[-1]
    fake_llm.script(ToolCall("memory_search", {"query": "secret project Bluebird", "scope": "all"}), "I don't know.")
    await ch.say("bob", "what is the secret project called?")
    await ch.wait_for(4)
    req = reply_requests(fake_llm)
    assert all("Bluebird" not in m.get("content", "") or m["role"] == "user"
               for r in req for m in r["messages"] if m["role"] in ("system", "tool"))
    await ch.say("alice", "/memory secret project")
    await ch.wait_for(5)
    assert "Bluebird" in ch.texts("alice")[-1]


async def test_one_conversation_in_order_many_in_parallel(bot, fake_llm):
    app, ch = bot
    fake_llm.responder = lambda req: Delay(0.05, brain.respond(req)) if req["messages"][0]["content"].startswith("You are") \
        else brain.respond(req)
    for i in range(20):
        await ch.say("carol", f"message number {i}")
    await ch.wait_for(20, timeout=120)
    assert [t.split("You said: ")[1] for t in ch.texts("carol")] == [f"message number {i}" for i in range(20)]
    assert ch.typing_max == 1  # one turn in flight per conversation
    ch.sent.clear()
    for i in range(20):
        await ch.say(f"user{i}", "hello there, I like tea")
    await ch.wait_for(20, timeout=120)
    assert ch.typing_max > 1  # conversations overlap
    assert sorted(r.chat_id for r in ch.sent) == sorted(f"user{i}" for i in range(20))


async def test_overflow_is_told_not_dropped(settings_for, fake_llm, clock, embedder):
    fake_llm.responder = lambda req: Delay(0.2, brain.respond(req))
    ch = RecordingChannel("console")
    app = build_app(settings_for(MEMGATE_AGENT_QUEUE_SIZE="2"), channels=[ch], clock=clock.now, embedder=embedder)
    async with app:
        for i in range(5):
            await ch.say("dave", f"msg {i}")
        await ch.wait_for(5, timeout=60)
        texts = ch.texts()
        assert sum("could not take this one" in t for t in texts) >= 2
        assert sum("You said: msg" in t for t in texts) + sum("could not take" in t for t in texts) == 5


async def test_llm_down_apologises_and_keeps_the_words(bot, fake_llm):
    app, ch = bot
    fake_llm.fail_next(3, status=503)
    await ch.say("erin", "my cat is called Miso")
    await ch.wait_for(1)
    assert "not answering" in ch.texts()[0]
    await app.gateway.idle()
    payload = app.store.read(lambda c: c.execute("SELECT payload FROM ingest_queue").fetchone()[0])
    assert "Miso" in payload


async def test_non_text_gets_an_honest_answer(bot):
    from bot.message import Kind

    app, ch = bot
    await ch.say("fay", "", kind=Kind.VOICE)
    await ch.wait_for(1)
    assert "Voice messages are not supported" in ch.texts()[0]


async def test_admin_stats_counts_todays_llm_use(bot, fake_llm):
    app, ch = bot
    await ch.say("root", "hello, I like chess")  # the console user is the owner when none is configured
    await ch.wait_for(1)
    await ch.say("root", "/stats")
    await ch.wait_for(2)
    stats = ch.texts()[-1]
    assert "LLM today: " in stats and "LLM today: 0 calls" not in stats


async def test_llm_usage_is_charged_to_the_space_of_the_turn_and_its_ingestion(bot, fake_llm):
    app, ch = bot
    await ch.say("alice", "I keep my bike in the blue shed.")
    await ch.say("bob", "My sister lives in Porto.")
    await ch.say("bob", "She is a nurse there.")
    await ch.wait_for(3)
    await app.gateway.idle()
    await app.engine.worker.drain()
    await app.extras["usage"].aflush()
    spaces = {u.display_name: u.space_id for u in await app.access.users()}
    rows = app.store.read(lambda c: c.execute(
        "SELECT space_id, purpose, count(*) FROM llm_usage_space GROUP BY ALL ORDER BY ALL").fetchall())
    per_space: dict[str, dict[str, int]] = {}
    for space, purpose, n in rows:
        per_space.setdefault(space, {})[purpose] = n
    assert set(per_space) == {spaces["alice"], spaces["bob"]}
    assert per_space[spaces["alice"]]["reply"] == 1 and per_space[spaces["bob"]]["reply"] == 2
    assert per_space[spaces["alice"]].get("ingest", 0) >= 1 and per_space[spaces["bob"]].get("ingest", 0) >= 1
    # Every call of a turn or its ingestion is charged somewhere: the per-space rows add up to the total.
    total = app.store.read(lambda c: c.execute(
        "SELECT count(*) FROM llm_usage WHERE purpose IN ('reply', 'ingest')").fetchone()[0])
    assert sum(n for space, purpose, n in rows if purpose in ("reply", "ingest")) == total


async def test_the_gateway_hands_off_many_blocking_calls_at_once(bot):
    """30 chats' reads and writes wait on the database and sockets together: the loop's pool
    runs 24 waiting calls at once (Python's default on 2 cores is 6, and they queued)."""
    import asyncio
    import threading

    meeting = threading.Barrier(24, timeout=20)
    await asyncio.gather(*(asyncio.to_thread(meeting.wait) for _ in range(24)))
