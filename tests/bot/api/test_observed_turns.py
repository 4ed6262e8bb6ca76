"""Turns driven through the real Telegram adapter (against the fake Bot API), the gateway, the
agent and litellm (against the fake LLM), with the API up: /metrics shows the turns by outcome,
their latency, the recall latency, LLM calls and tokens by purpose and the channel's failed sends
(transient and permanent); /api/v1/usage shows the tokens each turn's auto-recall injected."""

from __future__ import annotations

import asyncio
import re

import aiohttp

from adapters.telegram.adapter import TelegramAdapter
from bot.app import build_app
from bot.config import load_settings
from memory.prompts import MEMORY_BLOCK_HEADER
from memory.text import MEMORY_OPEN, estimate_tokens
from tests.fakes import brain
from tests.fakes.llm_server import FakeError
from tests.fakes.telegram_api import FakeTelegram

USER = 7


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (0 when the series is not there yet)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))) == want:
            return float(m.group(3))
    return 0.0


def respond(request: dict) -> object:
    """The fake brain, except that a reply to a message asking for it fails (HTTP 500). Only the
    message now counts: a failed turn's words come again before the next one (issue 30 item 4)."""
    user = next((m["content"] for m in reversed(request["messages"]) if m["role"] == "user"), "")
    now = user.splitlines()[-1] if user else ""
    if request["messages"][0]["content"].startswith("You are memgate") and "please fail" in now:
        return FakeError(status=500, message="scripted reply failure")
    return brain.respond(request)


async def test_turns_sends_and_recall_move_the_metrics_and_usage(tmp_path, fake_llm, embedder):
    fake_llm.responder = respond
    async with FakeTelegram() as tg:
        (tmp_path / "none.toml").write_text("")
        env = {"MEMGATE_CONFIG": str(tmp_path / "none.toml"), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
               "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model",
               "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_DM_POLICY": "open",
               "MEMGATE_DELIVERY_RETRY_BASE_SECONDS": "0.2", "MEMGATE_API_PORT": "0"}
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=1, retry_delay=0.01)
        app = build_app(load_settings(None, env=env), channels=[adapter], embedder=embedder, serve_api=True)
        async with app, aiohttp.ClientSession(base_url=app.extras["api"].url) as http:

            async def scrape() -> str:
                async with http.get("/metrics") as r:
                    assert r.status == 200
                    return await r.text()

            async def say(text: str) -> None:
                before = len(tg.sent_texts(USER))
                tg.inject_message(USER, text, first_name="Mia")
                await tg.wait_until(lambda: len(tg.sent_texts(USER)) > before, 60)
                await app.gateway.idle()

            start = await scrape()
            assert metric(start, "memgate_turns_total", channel="telegram", outcome="answered") == 0
            await say("I keep my bike in the blue shed behind the house.")
            await app.engine.worker.drain()  # the turn is now a memory the next turn recalls
            await say("Where is my bike?")
            await say("/help")
            await say("please fail this one")
            text = await scrape()
            assert metric(text, "memgate_turns_total", channel="telegram", outcome="answered") == 2
            assert metric(text, "memgate_turns_total", channel="telegram", outcome="command") == 1
            assert metric(text, "memgate_turns_total", channel="telegram", outcome="failed") == 1
            assert metric(text, "memgate_turn_latency_seconds_count") == 4
            assert metric(text, "memgate_turn_latency_seconds_sum") > 0
            assert metric(text, "memgate_recall_latency_seconds_count") == 3  # the agent's turns, not /help
            assert metric(text, "memgate_recall_injected_tokens_count") == 3
            assert metric(text, "memgate_llm_calls_total", purpose="reply", ok="true") >= 2
            assert metric(text, "memgate_llm_calls_total", purpose="reply", ok="false") >= 1
            assert metric(text, "memgate_llm_tokens_total", purpose="reply", type="prompt") > 0
            assert metric(text, "memgate_llm_calls_total", purpose="ingest", ok="true") >= 1

            # A send that fails for a passing reason is retried (and counted); a blocked user is not.
            tg.fail_network_next(3)  # the adapter tries 3 times, then the outbox waits and retries
            await say("Are you still there?")
            text = await scrape()
            assert metric(text, "memgate_channel_send_failures_total", channel="telegram", kind="transient") == 1
            tg.block(USER)
            before = app.gateway.outbox.stats.failed_permanent
            tg.inject_message(USER, "One more thing.", first_name="Mia")
            while app.gateway.outbox.stats.failed_permanent == before:
                await asyncio.sleep(0.05)
            await app.gateway.idle()
            text = await scrape()
            assert metric(text, "memgate_channel_send_failures_total", channel="telegram", kind="permanent") == 1
            assert metric(text, "memgate_channel_send_failures_total", channel="telegram", kind="transient") == 1
            assert metric(text, "memgate_turns_total", channel="telegram", outcome="answered") == 4

            # Usage: every agent turn recorded the tokens its memory block cost, for its own space.
            space = (await app.access.identity("telegram", str(USER))).space_id
            key = app.extras["api"].keys.create("read", space)[0]
            async with http.get("/api/v1/usage", headers={"Authorization": f"Bearer {key}"}) as r:
                usage = await r.json()
            (day,) = usage["turns"]
            assert day["turns"] == 5
            # One per turn: its first reply request (a tool round ends with the tool's answer, not the user).
            systems = [r["messages"][0]["content"] for r in fake_llm.requests
                       if r["messages"][0]["content"].startswith("You are memgate") and r["messages"][-1]["role"] == "user"]
            assert len(systems) == 5
            opening = f"{MEMORY_OPEN}\n{MEMORY_BLOCK_HEADER}"  # the prompt itself names the tag: find the block
            blocks = [s[s.rindex(opening):] if opening in s else "" for s in systems]
            injected = [estimate_tokens(b) if b else 0 for b in blocks]
            assert max(injected) > 0  # "where is my bike" was answered with the shed in its prompt
            assert day["injected_max"] == max(injected) and day["injected_tokens"] == sum(injected)
            other = app.extras["api"].keys.create("read", "u_someone_else")[0]
            async with http.get("/api/v1/usage", headers={"Authorization": f"Bearer {other}"}) as r:
                assert (await r.json())["turns"] == []
