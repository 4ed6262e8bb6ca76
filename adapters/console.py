"""The terminal channel: one local person talks to the bot on stdin/stdout.

Interactive terminals get a prompt and a spinner while the agent thinks; pipes (tests,
scripts) get plain lines, so the channel is scriptable: one message per input line, each
reply printed as `<bot>: text` followed by a blank line.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TextIO

from bot.channel import InboundHandler
from bot.errors import StoreError
from bot.message import Message, Reply

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
# Surrogates that are not a surrogateescape'd byte (those are U+DC80-U+DCFF).
_NOT_ESCAPED_BYTE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def clean_text(text: str) -> str:
    """Text that is safe to store and send: no lone surrogates.

    Bytes a surrogateescape decoder kept (U+DC80-U+DCFF) are turned back into bytes and decoded
    with replacement; any other lone surrogate becomes U+FFFD. Valid text is returned unchanged.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    text = _NOT_ESCAPED_BYTE.sub("\ufffd", text)
    raw = text.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "replace")


class ConsoleAdapter:
    """stdin -> Message, Reply -> stdout. EOF (Ctrl-D) or /quit ends the session."""

    def __init__(self, user: str, *, name: str = "console", bot_name: str = "memgate",
                 stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.name = name
        self.user = user
        self.bot_name = bot_name
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._tty = self._out.isatty() and self._in.isatty()
        self._task: asyncio.Task | None = None
        self._inbound: InboundHandler | None = None
        self.closed = asyncio.Event()
        self._counter = itertools.count(1)
        # Ids must not repeat across runs: the inbox takes a repeated id for a redelivery.
        self._run = uuid.uuid4().hex[:8]
        self._write_lock = asyncio.Lock()

    def is_up(self) -> bool:
        """Receiving: the reader still reads (Ctrl-D or a closed stdin ends it)."""
        return self._task is not None and not self._task.done()

    async def start(self, inbound: InboundHandler) -> None:
        self._inbound = inbound
        self._task = asyncio.create_task(self._read_loop(), name="console-reader")

    async def stop(self) -> None:
        if self._task and not self._task.done():
            self._task.cancel()
        self.closed.set()

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str] = asyncio.Queue()

        def reader() -> None:
            # A daemon thread, not the loop's executor: a read blocked on the terminal must not
            # hold up shutdown (asyncio.run waits for its executor's threads). It reads bytes when
            # it can and decodes them itself with replacement, so no byte sequence can kill it.
            raw = getattr(self._in, "buffer", None)
            try:
                if raw is not None:
                    for data in iter(raw.readline, b""):
                        loop.call_soon_threadsafe(lines.put_nowait, data.decode("utf-8", "replace") or "\n")
                else:
                    for line in iter(self._in.readline, ""):
                        loop.call_soon_threadsafe(lines.put_nowait, clean_text(line))
            finally:
                loop.call_soon_threadsafe(lines.put_nowait, "")

        threading.Thread(target=reader, name="console-stdin", daemon=True).start()
        try:
            while True:
                if self._tty:
                    self._write(f"{self.user}> ")
                line = await lines.get()
                if not line:
                    break
                text = line.rstrip("\n")
                if text.strip() in ("/quit", "/exit"):
                    break
                if not text.strip():
                    continue
                msg = Message(channel=self.name, chat_id=self.user, sender_id=self.user, sender_name=self.user,
                              text=text, timestamp=datetime.now(UTC), message_id=f"{self._run}-{next(self._counter)}")
                await self._hand_over(msg)
        finally:
            self.closed.set()

    async def _hand_over(self, msg: Message) -> None:
        """The terminal cannot send a line again: keep it and retry until the gateway recorded it."""
        assert self._inbound is not None
        delay = 0.5
        while True:
            try:
                await self._inbound(msg)
                return
            except StoreError:
                # The gateway has told the person why; the line waits here, in order.
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def send(self, reply: Reply) -> None:
        async with self._write_lock:
            text = reply.text
            if reply.document is not None:
                from pathlib import Path

                path = Path(reply.document.filename).resolve()
                path.write_bytes(reply.document.data)
                text = f"{text}\n(saved to {path})"
            self._write(f"{self.bot_name}: {text}\n\n")

    @asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        if not self._tty:
            yield
            return
        task = asyncio.create_task(self._spin())
        try:
            yield
        finally:
            task.cancel()
            self._write("\r" + " " * 20 + "\r")

    async def _spin(self) -> None:
        for ch in itertools.cycle(SPINNER):
            self._write(f"\r{ch} thinking…")
            await asyncio.sleep(0.1)

    def _write(self, text: str) -> None:
        try:
            self._out.write(text)
        except UnicodeEncodeError:  # a terminal that cannot show some characters still gets the rest
            enc = getattr(self._out, "encoding", None) or "utf-8"
            self._out.write(clean_text(text).encode(enc, "replace").decode(enc))
        self._out.flush()
