"""A PDF built to be slow (issue 31, item 1) against a real `memgate run` on the fake Bot API.

The red team's 6 KB PDF (20 pages sharing one compressed stream of text operators that show
nothing) froze the gateway for everyone while pypdf read it on the event loop, and froze it again
after a SIGKILL and restart. Here: while the PDF is read (in its own process), another person is
answered and /healthz answers; the gateway is SIGKILLed mid-read, its reading process dies with
it, and the restarted gateway answers the PDF as unreadable without reading it again (its read
timeout is 600 s, so a second read could not have answered within the wait) and answers others.
Nothing here asserts time: the waits only turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from pathlib import Path

import pytest

from bot.media.reader import UNREADABLE_TEXT
from tests.fakes.files import slow_pdf
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.procs import inbox_statuses, kill, memgate_env, responder, start, terminate, until

pytestmark = pytest.mark.timeout(900)

SENDER, OTHER = 301, 302


def reading_children(parent: int) -> list[int]:
    """The PDF reading processes `parent` started (bot.media.sandbox's child), alive."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and b"child_main" in cmdline:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def healthz(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=60) as resp:
            return resp.status
    except OSError:
        return 0


def answers(tg: FakeTelegram, msg: dict) -> list[str]:
    return [s["visible_text"] for s in tg.sent
            if s["chat_id"] == msg["chat"]["id"] and (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"]]


async def published_url(data: Path, proc: asyncio.subprocess.Process) -> str:
    def ready() -> bool:
        try:
            return json.loads((data / "api.json").read_text())["pid"] == proc.pid
        except (OSError, ValueError, KeyError):
            return False
    await until(ready, "the API address published", proc=proc)
    return json.loads((data / "api.json").read_text())["url"]


async def test_a_slow_pdf_delays_no_one_and_a_kill_mid_read_does_not_read_it_again(tmp_path: Path) -> None:
    async with FakeLLM() as llm, FakeTelegram() as tg:
        # base_url only: the downloads go to its file address (item 3), and the PDF is read for real.
        config = (f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n'
                  '[api]\nport = 0\n[media]\nread_timeout = 600.0\n')
        env = memgate_env(tmp_path, llm.base_url, config, TELEGRAM_BOT_TOKEN=tg.token)
        llm.responder = responder(slow_replies=False)
        proc = await start(env, "run")
        try:
            url = await published_url(tmp_path / "data", proc)
            pdf = tg.inject_message(SENDER, document="report.pdf", file_data=slow_pdf(), mime_type="application/pdf",
                                    first_name="Mallory")
            await until(lambda: len(reading_children(proc.pid)) == 1, "the PDF being read", proc=proc)
            (child,) = reading_children(proc.pid)
            # While it is read: another person is answered, and the health check answers.
            hello = tg.inject_message(OTHER, "Hello, what can you do?", first_name="Olga")
            await until(lambda: answers(tg, hello), "the other person answered", proc=proc)
            assert await asyncio.to_thread(healthz, url) == 200
            assert alive(child) and answers(tg, pdf) == []  # all that while, the PDF was still being read
        finally:
            await kill(proc)
        # The reading process dies with the gateway (nobody is left to kill it otherwise).
        await until(lambda: not alive(child), "the reading process gone with the gateway")

        proc = await start(env, "run")
        try:
            await until(lambda: answers(tg, pdf), "the PDF answered after the restart", proc=proc)
            assert answers(tg, pdf) == [UNREADABLE_TEXT.format(name="report.pdf")]
            assert reading_children(proc.pid) == []  # not read again
            later = tg.inject_message(OTHER, "Thanks!", first_name="Olga")
            await until(lambda: answers(tg, later), "the other person answered after the restart", proc=proc)
        finally:
            await terminate(proc)
        assert inbox_statuses(tmp_path / "data") == {"answered": 3}
        assert len(answers(tg, hello)) == 1 and len(answers(tg, pdf)) == 1
