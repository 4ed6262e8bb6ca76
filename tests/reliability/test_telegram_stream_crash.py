"""Telegram, a reply shown while it is written (issue 30 item 5), and `memgate run` SIGKILLed:
the person is left with the whole reply once, in the one message the draft opened, never a
fragment and a repeat (bot/delivery/drafts.py names the states). Two points of the crash:

- mid-stream (state 2): the draft message is out and recorded, the model still writing. After
  the restart the turn runs again and its draft goes on in that same message;
- replied (state 3): the reply is in the outbox with the draft's handle, its last edit refused
  by a flood. After the restart the outbox makes that edit.

Real processes, the fake Bot API and the fake model in the test; every wait is on what the chat
shows or what the fakes saw, never on a clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fakes import brain
from tests.fakes.llm_server import FakeLLM, Streamed
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.procs import is_reply_request, kill, memgate_env, settle, start, stored_user_texts, terminate, until

pytestmark = pytest.mark.timeout(600)  # real processes started twice each, on a busy machine

USER = 201
ASKED = "Tell me about my dog, please."
PIECES = ("Your dog is named Brindlequix. ", "He is a whippet ", "and he likes the sea, ", "the beach ",
          "and long walks.")
FINAL = "".join(PIECES)


def bot_texts(tg: FakeTelegram) -> list[str]:
    return tg.shown(USER)


def sends(tg: FakeTelegram) -> list[dict]:
    return [s for s in tg.sent if s["chat_id"] == USER]


async def run_until_killed(tmp: Path, llm: FakeLLM, tg: FakeTelegram, hold, ready, what: str) -> dict[str, str]:
    config = f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n'
    env = memgate_env(tmp, llm.base_url, config, TELEGRAM_BOT_TOKEN=tg.token)
    llm.responder = lambda req: Streamed(PIECES, hold=hold) if is_reply_request(req) else brain.respond(req)
    proc = await start(env, "run")
    try:
        tg.inject_message(USER, ASKED, first_name="Ann")
        await until(ready, what, proc=proc)
    finally:
        await kill(proc)
    return env


async def restart_until_whole(tmp: Path, env: dict[str, str], llm: FakeLLM, tg: FakeTelegram) -> None:
    llm.responder = lambda req: Streamed(PIECES) if is_reply_request(req) else brain.respond(req)
    proc = await start(env, "run")
    try:
        assert await settle(lambda: FINAL in bot_texts(tg), 180, proc=proc), bot_texts(tg)
    finally:
        await terminate(proc)


async def test_a_kill_mid_stream_leaves_one_whole_reply_in_the_same_message(tmp_path):
    killed = asyncio.Event()

    async with FakeLLM() as llm, FakeTelegram() as tg:
        async def hold(i: int) -> None:
            if i == len(PIECES) - 1:
                await killed.wait()        # the model is still writing when the process dies
                return
            words = PIECES[i - 1].split()[-1]
            await tg.wait_until(lambda: any(words in t for t in bot_texts(tg)), 300)

        # An edit after the draft message opened: its handle was recorded before it (drafts.py).
        env = await run_until_killed(
            tmp_path, llm, tg, hold,
            lambda: any("the sea," in t for t in bot_texts(tg)) and bool(tg.edits), "the draft grown and edited")
        killed.set()
        fragment = bot_texts(tg)
        assert len(fragment) == 1 and FINAL not in fragment[0]
        await restart_until_whole(tmp_path, env, llm, tg)
        assert bot_texts(tg) == [FINAL]                    # one message, whole
        assert len(sends(tg)) == 1                          # the draft's: the restart only edited it
    assert stored_user_texts(tmp_path / "data").count(ASKED) == 1


async def test_a_kill_after_the_reply_is_stored_finishes_the_same_message(tmp_path):
    async with FakeLLM() as llm, FakeTelegram() as tg:
        tg.refuse_edits = True                              # a flood: every edit refused, the draft stops growing

        async def hold(i: int) -> None:
            if i == 1:
                await tg.wait_until(lambda: bool(bot_texts(tg)), 300)   # the rest once the draft message is out

        def final_edit_refused() -> bool:
            return any(r.get("method") == "editMessageText" and "long walks" in str(r.get("text")) for r in tg.rejected)

        env = await run_until_killed(tmp_path, llm, tg, hold, final_edit_refused, "the outbox's edit refused")
        assert FINAL not in bot_texts(tg)[0]
        tg.refuse_edits = False
        await restart_until_whole(tmp_path, env, llm, tg)
        assert bot_texts(tg) == [FINAL]
        assert len(sends(tg)) == 1
    assert stored_user_texts(tmp_path / "data").count(ASKED) == 1
