"""`memgate chat` attached to a running gateway shows the reply as it is written (issue 30 item 5):
the gateway's event stream carries the reply so far (`draft` events) and the terminal draws it
above the prompt; the finished reply takes its place. The event stream itself: a client of the
API sees drafts that grow, then the whole reply. The fake model holds the reply's last piece
until the test has seen the first words; nothing is timed."""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
import pytest

from tests.adapters.pty_screen import ROOT, Tty, tty_env
from tests.adapters.test_console_streaming import slow_replies
from tests.bot.cli.test_run_without_terminal import headless

pytestmark = pytest.mark.timeout(600)  # real subprocesses on a shared 2-core machine


async def events(url: str, token: str, user: str):
    """The attached chat's events, pings left out."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        async with http.get(url + "/api/v1/admin/chat/events", params={"user": user}) as stream:
            while line := await stream.content.readline():
                event = json.loads(line)
                if event["type"] != "ping":
                    yield event, http


async def test_the_attached_terminal_and_its_event_stream_show_the_reply_as_it_is_written(tmp_path, fake_llm):
    release = asyncio.Event()
    fake_llm.responder = slow_replies(release)
    env = tty_env(tmp_path, fake_llm.base_url, MEMGATE_API_PORT="0")
    data = tmp_path / "data"
    async with headless([sys.executable, "-m", "bot.cli", "run"], env, ROOT, data) as (url, err, out):
        token = (data / "api.token").read_text().strip()
        # A client of the API: drafts that grow while the reply is written, then the whole reply.
        drafts: list[str] = []
        text = ""
        async for event, http in events(url, token, "bob"):
            if event["type"] == "attached":
                async with http.post(url + "/api/v1/admin/chat/messages",
                                     json={"user": "bob", "text": "what is my dog called?", "message_id": "b1"}) as r:
                    assert r.status == 202
            elif event["type"] == "draft":
                assert event["reply_to"] == "b1"
                text = text[: event["from"]] + event["text"]
                drafts.append(text)
                if "Brindlequix, and he" in text:
                    release.set()           # the first words are out before the model wrote the rest
            elif event["type"] == "reply":
                final = event["text"]
                break
        assert final == "The dog is named Brindlequix, and he likes the sea."
        assert drafts and all(final.startswith(d) for d in drafts) and "likes" not in drafts[0]
        assert not any("sea." in d for d in drafts)   # the last word waited for the end

        # The attached terminal: the same reply grows above the prompt.
        release.clear()
        tty = Tty(["-m", "bot.cli", "chat", "--user", "ann"], env)
        try:
            await tty.prompt("ann> ")
            tty.send("what is my dog called?\r")
            await tty.shows("memgate: The dog is named Brindlequix, and he")
            assert "likes the sea" not in tty.screen()
            assert tty.cursor_line() == "ann>"
            release.set()
            await tty.shows("memgate: The dog is named Brindlequix, and he likes the sea.")
            await tty.prompt("ann> ")
            assert sum("The dog is named" in line for line in tty.screen_lines()) == 1
            tty.send("\x04")
            assert await tty.exit_status() == 0
        finally:
            tty.close()
