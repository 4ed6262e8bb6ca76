"""Telegram: SIGKILL of `memgate run` before, during and after the reply, against the fake Bot
API. Every update the bot confirmed (the next getUpdates offset moved past it) must be answered
once and stored after the restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import kill, memgate_env, responder, settle, start, stored_user_texts, tally, terminate, until

# Real processes started twice each, on a machine that may be busy: far above pytest's default.
pytestmark = pytest.mark.timeout(600)

MESSAGES = ("My sister Ingrid lives in Tromso.", "I started learning the cello in March.",
            "Our cat is called Pixel and hates the vacuum.")
USERS = (101, 102, 103)


def _answers(tg: FakeTelegram, sent: list[dict]) -> dict[str, int]:
    """Replies per message: the first part of each reply quotes the message it answers."""
    out = {}
    for msg in sent:
        out[msg["text"]] = sum(1 for s in tg.sent if s["chat_id"] == msg["chat"]["id"]
                               and (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"])
    return out


async def telegram_kill(tmp: Path, when: str) -> Counts:
    name = f"telegram: SIGKILL {when} the reply"
    async with FakeLLM() as llm, FakeTelegram() as tg:
        config = f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n'
        env = memgate_env(tmp, llm.base_url, config, TELEGRAM_BOT_TOKEN=tg.token)
        llm.responder = responder(slow_replies=when != "after")
        proc = await start(env, "run")
        try:
            sent = [tg.inject_message(user, text, first_name=f"User{user}") for user, text in zip(USERS, MESSAGES)]
            if when == "before":
                # Confirmed by the bot: Telegram will not hand these updates out again.
                await until(lambda: tg.pending_updates == 0 and tg.calls.count("getUpdates") >= 2,
                            "the updates confirmed", proc=proc)
            elif when == "during":
                await until(lambda: sum(1 for r in llm.requests if r["messages"][0]["content"].startswith("You are"))
                            >= len(MESSAGES), "every reply being generated", proc=proc)
            else:
                await until(lambda: all(_answers(tg, sent).values()), "every reply sent", proc=proc)
        finally:
            await kill(proc)
        confirmed = tg.pending_updates == 0
        llm.responder = responder(slow_replies=False)
        proc = await start(env, "run")
        try:
            await settle(lambda: all(_answers(tg, sent).values()), proc=proc)
        finally:
            await terminate(proc)
        stored = stored_user_texts(tmp / "data")
        return tally(name, list(MESSAGES), _answers(tg, sent), stored,
                     note="updates confirmed before the kill" if confirmed else "")


@scenario("telegram: SIGKILL before the reply")
async def telegram_kill_before(tmp: Path) -> Counts:
    return await telegram_kill(tmp, "before")


@scenario("telegram: SIGKILL during the reply")
async def telegram_kill_during(tmp: Path) -> Counts:
    return await telegram_kill(tmp, "during")


@scenario("telegram: SIGKILL after the reply")
async def telegram_kill_after(tmp: Path) -> Counts:
    return await telegram_kill(tmp, "after")


@pytest.mark.parametrize("run", [telegram_kill_before, telegram_kill_during, telegram_kill_after])
async def test_telegram_sigkill_loses_nothing_confirmed(tmp_path: Path, run) -> None:
    counts = await run(tmp_path)
    assert counts.messages_in == 3
    assert_safe(counts)
