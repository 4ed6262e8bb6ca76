"""The terminal shows a reply as it is written (issue 30 item 5: "the first token came at 2.6 s and
the text showed at 20.2 s"). The fake model writes the reply slowly and holds its last piece
until the test has seen the first words on the screen (or in the pipe): never waited on a clock.
The finished reply is shown once, where the draft was, and the prompt is back under it."""

from __future__ import annotations

import asyncio
import sys

import pytest

from tests.adapters.pty_screen import Tty, tty_env
from tests.fakes import brain
from tests.fakes.llm_server import Streamed
from tests.reliability.memgate_cli import ROOT, cli_env
from tests.reliability.procs import is_reply_request

pytestmark = pytest.mark.timeout(600)  # real subprocesses on a shared 2-core machine

PIECES = ("The dog ", "is named ", "Brindlequix, ", "and he ", "likes the sea.")


def slow_replies(release: asyncio.Event):
    """Replies written piece by piece, the last piece only once `release` is set."""
    async def hold(i: int) -> None:
        if i == len(PIECES) - 1:
            await release.wait()

    def respond(req: dict):
        return Streamed(PIECES, hold=hold) if is_reply_request(req) else brain.respond(req)
    return respond


async def test_the_terminal_shows_the_first_words_before_the_reply_ends(tmp_path, fake_llm):
    release = asyncio.Event()
    fake_llm.responder = slow_replies(release)
    tty = Tty(["-m", "bot.cli", "chat", "--user", "ann"], tty_env(tmp_path, fake_llm.base_url))
    try:
        await tty.prompt("ann> ")
        tty.send("what is my dog called?\r")
        await tty.shows("memgate: The dog is named Brindlequix, and he")
        assert "likes the sea" not in tty.screen()           # the model has not written it yet
        assert tty.cursor_line() == "ann>"                     # the draft is above the prompt; typing still works
        tty.send("x")
        await tty.wait_screen(lambda lines: tty.cursor_line() == "ann> x", "the typed x on the prompt line")
        tty.send("\x7f")
        release.set()
        await tty.shows("memgate: The dog is named Brindlequix, and he likes the sea.")
        await tty.prompt("ann> ")
        lines = tty.screen_lines()
        assert sum("The dog is named" in line for line in lines) == 1   # the finished reply replaced the draft
        reply = next(n for n, line in enumerate(lines) if "The dog is named" in line)
        assert max(n for n, line in enumerate(lines) if line == "ann>") > reply
        tty.send("\x04")
        assert await tty.exit_status() == 0
    finally:
        tty.close()


async def test_a_pipe_gets_the_words_as_they_come_and_the_same_lines_in_the_end(tmp_path, fake_llm):
    release = asyncio.Event()
    fake_llm.responder = slow_replies(release)
    env = cli_env(tmp_path, MEMGATE_LLM_API_BASE=fake_llm.base_url, MEMGATE_LLM_MODEL="fake-model",
                  MEMGATE_LLM_RETRIES="0")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--user", "ivy", env=env, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"what is my dog called?\n")
        await proc.stdin.drain()
        seen = b""
        while b"Brindlequix, and he" not in seen:
            chunk = await asyncio.wait_for(proc.stdout.read(100), 300)
            assert chunk, f"the pipe closed before the first words came: {seen!r}"
            seen += chunk
        assert b"likes the sea" not in seen
        release.set()
        proc.stdin.close()
        rest, err = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = (seen + rest).decode()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "memgate: The dog is named Brindlequix, and he likes the sea.\n\n" in out
    assert out.count("The dog is named") == 1
