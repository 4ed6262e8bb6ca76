"""Reminders with two `memgate run` processes on one PostgreSQL, Telegram through the fake Bot API:
the process that took the /remind (the poller) is SIGKILLed at the reminder's due time, or right
after it sent the reminder and recorded the send. Either way the reminder reaches the chat exactly
once: the claim and its outbox row are one transaction, and the outbox delivers the row once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.procs import kill, memgate_env, responder, rows, start, terminate, until

pytestmark = [pytest.mark.timeout(600), pytest.mark.postgres]
WHAT = "stretch your legs"


def _reminders(tg: FakeTelegram) -> list[dict]:
    return [s for s in list(tg.sent) if "⏰" in (s.get("text") or "") and WHAT in s["text"]]


async def two_processes_one_killed(tmp: Path, url: str, when: str) -> dict:
    async with FakeLLM() as llm, FakeTelegram() as tg:
        config = (f'[store]\nurl = "{url}"\ntakeover_seconds = 0.5\n'
                  f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n'
                  '[reminders]\npoll_seconds = 0.5\n')
        envs = [memgate_env(tmp / p, llm.base_url, config, TELEGRAM_BOT_TOKEN=tg.token) for p in ("a", "b")]
        llm.responder = responder(slow_replies=False)
        first = await start(envs[0], "run")
        second = None
        try:
            await until(lambda: tg.calls.count("getUpdates") >= 1, "the first process polling", proc=first)
            second = await start(envs[1], "run")
            await until(lambda: len(rows(url, "SELECT n FROM workers")) >= 2, "the second process joined", proc=second)
            tg.inject_message(4242, f"/remind in 20 seconds {WHAT}", first_name="Ann")
            await until(lambda: any("I'll remind you" in (s.get("text") or "") for s in tg.sent), "the reminder set",
                        proc=first)
            due = rows(url, "SELECT due_at FROM reminders")[0][0].replace(tzinfo=UTC)
            if when == "at the due time":
                await until(lambda: datetime.now(UTC) >= due, "the due time", timeout=120, proc=first)
            else:
                # Killed the moment the send is recorded. (Killed in the milliseconds between Telegram
                # taking it and the record, it goes out twice, like any reply: docs/scale-out.md.)
                await until(lambda: bool(_reminders(tg)) and not rows(
                    url, "SELECT count(*) FROM outbox WHERE status = 'pending'")[0][0], "the reminder sent", timeout=120,
                    proc=first)
            await kill(first)
            killed_at = datetime.now(UTC)
            await until(lambda: bool(_reminders(tg)), "the reminder sent by the survivor", timeout=180, proc=second)
            # Long enough for a second copy to show up: the survivor took the bot over and every
            # outbox row it adopted is finished.
            await until(lambda: rows(url, "SELECT count(*) FROM outbox WHERE status = 'pending'")[0][0] == 0
                        and tg.calls.count("getUpdates") > 2, "the outbox empty", timeout=180, proc=second)
            await asyncio.sleep(2)
        finally:
            await kill(first)
            if second is not None:
                await terminate(second)
        state = rows(url, "SELECT status, sent FROM reminders")[0]
        return {"sent_to_chat": len(_reminders(tg)), "status": state[0], "claims": state[1],
                "late_s": round((killed_at - due).total_seconds(), 1)}


@pytest.mark.parametrize("when", ["at the due time", "right after sending"])
async def test_a_reminder_is_sent_once_when_a_process_is_killed(tmp_path: Path, pg_url: str, when: str) -> None:
    seen = await two_processes_one_killed(tmp_path, pg_url, when)
    print(when, seen)  # the figures (pytest -s shows them)
    assert seen["sent_to_chat"] == 1
    assert (seen["status"], seen["claims"]) == ("done", 1)
