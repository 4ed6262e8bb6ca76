"""The agent's reminder tools through the real gateway, agent, litellm and DuckDB against the fake
model: the prompt carries the person's local time and zone; "remind me tomorrow at 9 to call mum"
becomes a reminder; "cancel the plant reminder" lists, then cancels by id."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from bot.app import build_app
from bot.config import load_settings
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.llm_server import ToolCall

pytestmark = pytest.mark.timeout(600)


def _replies(fake_llm) -> list[dict]:
    return [r for r in fake_llm.requests if str(r["messages"][0]["content"]).startswith("You are memgate")]


async def test_the_agent_sets_lists_and_cancels_reminders_in_the_persons_zone(tmp_path, fake_llm, embedder):
    clock = FakeClock(datetime(2026, 5, 6, 2, 0, tzinfo=UTC))   # Wednesday 10:00 in Shanghai
    fake_llm.responder = brain.respond
    env = {"MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_LLM_API_BASE": fake_llm.base_url,
           "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
           "MEMGATE_LLM_MEMORY_LLM": "false", "MEMGATE_API_ENABLED": "false",
           "MEMGATE_REMINDERS_TIMEZONE": "Asia/Shanghai", "MEMGATE_ACCESS_DM_POLICY": "open"}
    channel = RecordingChannel("telegram")
    app = build_app(load_settings(None, env=env), channels=[channel], clock=clock.now, embedder=embedder)
    async with app:
        fake_llm.script(ToolCall("reminder_create", {"when": "tomorrow 9:00", "what": "call mum"}), "Done: tomorrow 9:00.")
        await channel.say("ann", "remind me tomorrow at 9 to call mum")
        await channel.wait_for(1, timeout=120)
        first = _replies(fake_llm)[0]
        assert "2026-05-06 10:00 (Wednesday), time zone Asia/Shanghai" in first["messages"][0]["content"]
        assert {"reminder_create", "reminder_list", "reminder_cancel"} <= {t["function"]["name"] for t in first["tools"]}
        created = json.loads(_replies(fake_llm)[1]["messages"][-1]["content"])
        assert created["next"] == "Thu 2026-05-07 09:00" and created["zone"] == "Asia/Shanghai"
        fake_llm.script(ToolCall("reminder_create", {"when": "every monday 8:00", "what": "water the plants"}), "Set.")
        await channel.say("ann", "every monday at 8 remind me to water the plants")
        await channel.wait_for(2, timeout=120)
        plants = json.loads(_replies(fake_llm)[3]["messages"][-1]["content"])["id"]
        fake_llm.script(ToolCall("reminder_list", {}), ToolCall("reminder_cancel", {"id": plants}), "Cancelled it.")
        await channel.say("ann", "cancel the plant reminder")
        await channel.wait_for(3, timeout=120)
        listed = json.loads(_replies(fake_llm)[5]["messages"][-1]["content"])
        assert [r["what"] for r in listed["reminders"]] == ["call mum", "water the plants"]
        cancelled = json.loads(_replies(fake_llm)[6]["messages"][-1]["content"])
        assert cancelled["cancelled"]["what"] == "water the plants"
        rows = app.store.read(lambda c: c.execute("SELECT text, status FROM reminders ORDER BY id").fetchall())
        assert rows == [("call mum", "active"), ("water the plants", "cancelled")]
        await app.gateway.idle()
