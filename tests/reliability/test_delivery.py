"""Delivery faults on Telegram, through the whole bot: the real python-telegram-bot client
against the fake Bot API, the real gateway, outbox, agent, litellm and DuckDB.

Found: a reply meeting four 429s in a row was dropped ("still rate limited after retries") and
the remaining parts of a multi-part reply went with it. Now the outbox keeps each part and retries
it no sooner than retry_after, in order; a reply to someone who blocked the bot is a permanent
failure: recorded, counted, never retried, and what they said is still stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.app import build_app
from bot.config import load_settings
from tests.fakes import brain
from tests.fakes.llm_server import FakeLLM, Script
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import is_reply_request

pytestmark = pytest.mark.timeout(300)

PATIENT, BLOCKER = 51, 52
STORY = "\n\n".join(f"Paragraph {i}: " + "words " * 500 for i in range(3))  # three Telegram messages


@scenario("telegram: a 3-part reply through six 429s, and a user who blocked the bot")
async def telegram_429s_and_a_blocked_chat(tmp: Path) -> Counts:
    def respond(req: dict) -> Script:
        last = req["messages"][-1]
        if is_reply_request(req) and last["role"] == "user" and "long story" in last["content"]:
            return STORY
        return brain.respond(req)

    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "none.toml").write_text("")
    async with FakeLLM(responder=respond) as llm, FakeTelegram() as tg:
        env = {"MEMGATE_CONFIG": str(tmp / "none.toml"), "MEMGATE_DATA_DIR": str(tmp / "data"),
               "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
               "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_DM_POLICY": "open",
               "MEMGATE_DELIVERY_RETRY_BASE_SECONDS": "0.2"}
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=5, typing_interval=0.5, retry_delay=0.01)
        app = build_app(load_settings(None, env=env), channels=[adapter])
        async with app:
            tg.rate_limit_next(6, retry_after=1)  # the client tries 4 times; the outbox waits out the rest
            tg.block(BLOCKER)
            said = [tg.inject_message(PATIENT, "tell me the long story", first_name="Pat"),
                    tg.inject_message(BLOCKER, "I keep bees on the roof of my office", first_name="Bea"),
                    tg.inject_message(PATIENT, "and then?", first_name="Pat")]
            outbox = app.gateway.outbox
            await tg.wait_until(lambda: len([s for s in tg.sent if s["chat_id"] == PATIENT]) >= 4
                                and outbox.stats.failed_permanent >= 1, timeout=120)
            await app.gateway.idle()
            await app.engine.worker.drain()
            stored = app.store.read(lambda c: c.execute(
                "SELECT count(DISTINCT turn_id) FROM memories WHERE kind = 'chunk' AND status = 'active' AND text LIKE '%bees on the roof%'"
            ).fetchone()[0])
            inbox = app.gateway.inbox.counts()
            permanent = outbox.stats.failed_permanent
    texts = [s["visible_text"] for s in tg.sent if s["chat_id"] == PATIENT]
    story = [t.split(":")[0] for t in texts if t.startswith("Paragraph")]
    in_order = story == ["Paragraph 0", "Paragraph 1", "Paragraph 2"] and texts[-1].endswith("You said: and then?")
    twice = len(texts) - len(set(texts))
    # The blocked person's message is not lost when it is stored and its failure recorded (closed).
    answered = 2 if in_order else 0
    lost = (len(said) - answered - (1 if stored and inbox.get("closed") == 1 else 0)) + int(permanent != 1)
    return Counts("telegram: a 3-part reply through six 429s, and a user who blocked the bot", messages_in=len(said),
                  answered=answered, stored=stored, lost=lost, leaked=0, answered_twice=twice,
                  note=f"{len(tg.rejected)} sends refused; inbox {inbox}; permanent failures {permanent}")


async def test_telegram_429s_and_a_blocked_chat(tmp_path):
    counts = await telegram_429s_and_a_blocked_chat(tmp_path)
    assert_safe(counts)
    assert counts.answered == 2 and counts.stored == 1, counts
