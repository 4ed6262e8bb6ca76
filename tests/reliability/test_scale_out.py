"""Two `memgate run` processes on one PostgreSQL, Telegram through the fake Bot API: one polls,
the other stands by; the poller is killed with SIGKILL midway through 20 chats x 20 messages.
Every message must be answered exactly once and captured, the standby must take the bot over,
and at no time may two processes poll the bot (the fake answers a second getUpdates with 409,
as Telegram does)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.harness import Counts, assert_safe
from tests.reliability.procs import (is_reply_request, kill, memgate_env, responder, rows, settle, start,
                                     stored_user_texts, tally, terminate, until)

pytestmark = [pytest.mark.timeout(600), pytest.mark.postgres]

CHATS, ROUNDS = 20, 20
STORAGE_NOTICE = "could not save your message"  # bot.turn.gateway.STORAGE_DOWN_TEXT


def _answers(tg: FakeTelegram, sent: list[dict]) -> dict[str, int]:
    """Replies per message (the first part of a reply quotes the message it answers; so does a
    notice that the store could not record it yet, which is not an answer: on a machine this busy
    the pool can run dry for its 30 s timeout, and every sender is told, issue 22 A5)."""
    quoted = Counter((int(s["chat_id"]), (s.get("reply_parameters") or {}).get("message_id")) for s in list(tg.sent)
                     if STORAGE_NOTICE not in (s.get("text") or ""))
    return {m["text"]: quoted[(m["chat"]["id"], m["message_id"])] for m in sent}


class RepliesQuiet:
    """True once every reply Telegram took is recorded as sent, and the replies sent and the
    reply requests asked have not changed for 0.5 s (the turns after them wait on the held LLM)."""

    def __init__(self, tg: FakeTelegram, llm: FakeLLM, url: str) -> None:
        self.tg, self.llm, self.url = tg, llm, url
        self.seen: tuple[int, int] | None = None
        self.since = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        seen = (len(self.tg.sent), sum(1 for r in self.llm.requests if is_reply_request(r)))
        if seen != self.seen:
            self.seen, self.since = seen, now
            return False
        if now - self.since < 0.5:
            return False
        return rows(self.url, "SELECT count(*) FROM outbox WHERE status = 'sent'")[0][0] == seen[0]


async def two_processes_one_killed(tmp: Path, url: str) -> tuple[Counts, dict[str, float]]:
    name = "telegram on PostgreSQL: two processes, the poller SIGKILLed midway"
    async with FakeLLM() as llm, FakeTelegram() as tg:
        config = (f'[store]\nurl = "{url}"\ntakeover_seconds = 0.5\n'
                  f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n')
        envs = [memgate_env(tmp / p, llm.base_url, config, TELEGRAM_BOT_TOKEN=tg.token) for p in ("a", "b")]
        hold = [False]
        fast, slow = responder(slow_replies=False), responder(slow_replies=True)
        llm.responder = lambda req: (slow if hold[0] else fast)(req)
        first = await start(envs[0], "run")
        second = None
        try:
            await until(lambda: tg.calls.count("getUpdates") >= 1, "the first process polling", proc=first)
            second = await start(envs[1], "run")
            await until(lambda: len(rows(url, "SELECT n FROM workers")) >= 2, "the second process joined", proc=second)
            sent = []
            for r in range(ROUNDS):
                for c in range(CHATS):
                    sent.append(tg.inject_message(1000 + c, f"chat {c} note {r}: I keep item {c * 100 + r} in box {r}",
                                                  first_name=f"User{c}"))
                await asyncio.sleep(0.05)
            texts = [m["text"] for m in sent]
            await until(lambda: sum(1 for n in _answers(tg, sent).values() if n) >= len(sent) // 3,
                        "a third of the messages answered", proc=first)
            # Killed while turns are being generated: from here the first process's replies hang
            # (the agent "thinking"), so the kill lands in the middle of turns, never between a
            # send Telegram took and its record (that window, a few ms, is the one no Bot API
            # call can close: see docs/scale-out.md).
            hold[0] = True
            await until(RepliesQuiet(tg, llm, url), "the first process mid-turn on every busy chat", proc=first)
            answered_before = sum(1 for n in _answers(tg, sent).values() if n)
            polls_before = tg.calls.count("getUpdates")
            await kill(first)
            hold[0] = False
            killed_at = time.monotonic()
            await until(lambda: tg.calls.count("getUpdates") > polls_before, "the standby polling", proc=second)
            takeover_s = time.monotonic() - killed_at
            await settle(lambda: all(_answers(tg, sent).values()), timeout=300, proc=second)
            # And every captured turn turned into memory by the surviving process (a space the
            # dead one was ingesting is free the moment it died).
            await settle(lambda: rows(url, "SELECT count(*) FROM ingest_queue WHERE status = 'done'")[0][0]
                         >= CHATS * ROUNDS, timeout=300, proc=second)
        finally:
            await kill(first)
            if second is not None:
                await terminate(second)
        counts = tally(name, texts, _answers(tg, sent), stored_user_texts(url), note=f"killed after {answered_before} answered")
        ingested = dict(rows(url, "SELECT status, count(*) FROM ingest_queue GROUP BY status"))
        twice = rows(url, "SELECT turn_id, text FROM memories WHERE kind = 'chunk' GROUP BY turn_id, text HAVING count(*) > 1")
        return counts, {"ingested": ingested, "chunks_twice": len(twice), "conflicts": tg.conflicts, "takeover_s": takeover_s, "answered_before_kill": answered_before}


async def test_two_processes_on_postgres_lose_nothing_when_the_poller_dies(tmp_path: Path, pg_url: str) -> None:
    counts, seen = await two_processes_one_killed(tmp_path, pg_url)
    print(counts, seen)  # the figures (pytest -s shows them)
    assert counts.messages_in == CHATS * ROUNDS
    assert 0 < seen["answered_before_kill"] < CHATS * ROUNDS  # killed midway
    assert seen["conflicts"] == 0  # never two pollers at once
    assert seen["ingested"] == {"done": CHATS * ROUNDS} and seen["chunks_twice"] == 0
    assert_safe(counts)
