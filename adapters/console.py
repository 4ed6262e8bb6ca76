"""The terminal channel: one local person talks to the bot on stdin/stdout.

Interactive terminals get a line editor with history (prompt_toolkit), the prompt redrawn
under every reply and a spinner beside it while the agent thinks; pipes (tests, scripts) get
plain lines, so the channel is scriptable: one message per input line, each reply printed as
`<bot>: text` followed by a blank line.

Replies are shown as they are written (bot.channel.ShowsDrafts): on a terminal the reply so far
grows above the prompt, and the finished reply is printed in its place; into a pipe the words are
written as they come, and the finished reply completes the same line (the output is the same as
when it came whole). A finished reply that is not the draft's continuation (the model started
over) is printed whole on a line of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.channel import CancelHook, InboundHandler, MenuCommand
from bot.errors import StoreError
from bot.message import Message, Reply
from memory.private_files import write_private

if TYPE_CHECKING:
    from adapters.line_editing import LineEditor

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


# Seconds between two shows of a reply being written: a terminal redraws the prompt and the draft
# for each; a pipe only writes the new words.
DRAFT_INTERVAL_TTY = 0.1
DRAFT_INTERVAL_PIPE = 0.02


class ConsoleDraft:
    """A reply being written, on the terminal (bot.channel.Draft; no handles: nothing outlives the process)."""

    handles: Sequence[str] = ()

    def __init__(self, console: ConsoleAdapter, chat_id: str) -> None:
        self.console = console
        self.chat_id = chat_id
        self.interval = DRAFT_INTERVAL_TTY if console.interactive else DRAFT_INTERVAL_PIPE
        self.printed = ""   # into a pipe: the text written so far

    async def show(self, text: str) -> bool:
        await self.console.show_draft(self, text)
        return True

    async def drop(self) -> None:
        await self.console.end_draft(self)


LEAVE_WORDS = frozenset({"/quit", "/exit", "quit", "exit"})
LEAVE_HELP = "/quit, /exit, quit, Ctrl-D, Ctrl-C on an empty line: leave the terminal chat"
LINE_EDIT_HELP = ("In the terminal: arrow keys edit the line, Up/Down recall earlier lines, Tab completes /commands, "
                  "Ctrl-C clears the line or stops the reply being written, Ctrl-L clears the screen")


class ConsoleAdapter:
    """stdin -> Message, Reply -> stdout. Ctrl-D, /quit, /exit, quit or exit end the session, and
    Ctrl-C on an empty line with no reply in flight.

    On a terminal the line is read by adapters/line_editing.py (editing, history in
    `history_path`, Tab completion, Ctrl-C clears the line or cancels the reply in flight through
    `on_cancel`); replies and the spinner are drawn above the prompt, which is redrawn under each
    of them. Anything else (a pipe, a file) is read line by line as it comes."""

    def __init__(self, user: str, *, name: str = "console", bot_name: str = "memgate",
                 stdin: TextIO | None = None, stdout: TextIO | None = None,
                 history_path: Path | None = None) -> None:
        self.name = name
        self.user = user
        self.bot_name = bot_name
        self._own_stdout = stdout is None
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._tty = self._out.isatty() and self._in.isatty()
        self._history_path = history_path
        self._task: asyncio.Task | None = None
        self._inbound: InboundHandler | None = None
        self.closed = asyncio.Event()
        self._counter = itertools.count(1)
        # Ids must not repeat across runs: the inbox takes a repeated id for a redelivery.
        self._run = uuid.uuid4().hex[:8]
        self._write_lock = asyncio.Lock()
        self._thinking = 0
        self._editor: LineEditor | None = None  # while the prompt runs
        self._menu: list[str] = []
        # Filled in by the composition root: stops the turn in flight in this chat (Ctrl-C).
        self.on_cancel: CancelHook | None = None
        self._cancelling: set[asyncio.Task] = set()
        self._draft: ConsoleDraft | None = None  # the reply being written, shown

    @property
    def interactive(self) -> bool:
        """Reading a terminal (line editing, spinner), not a pipe."""
        return self._tty

    def local_commands(self) -> list[tuple[str, str]]:
        """Commands this channel answers itself, for /help: (name, help line)."""
        return [("quit", LEAVE_HELP), ("exit", "")]

    def is_up(self) -> bool:
        """Receiving: the reader still reads (Ctrl-D or a closed stdin ends it)."""
        return self._task is not None and not self._task.done()

    def reader_chat(self, recipient_id: str, chat_id: str) -> str | None:
        """This terminal's chat while it is open and it is the person's (bot.channel.KnowsReaders)."""
        return self.user if recipient_id == self.user and self.is_up() else None

    async def start(self, inbound: InboundHandler) -> None:
        self._inbound = inbound
        loop = self._prompt_loop() if self._tty else self._read_loop()
        self._task = asyncio.create_task(loop, name="console-reader")

    async def stop(self) -> None:
        if self._task and not self._task.done():
            self._task.cancel()
            try:
                await self._task   # the prompt gives the terminal back before we go on
            except (asyncio.CancelledError, Exception):
                pass
        self.closed.set()

    async def _line(self, text: str) -> bool:
        """Hand one line over; False when it asks to leave."""
        if text.strip().lower() in LEAVE_WORDS:
            return False
        if text.strip():
            msg = Message(channel=self.name, chat_id=self.user, sender_id=self.user, sender_name=self.user,
                          text=text, timestamp=datetime.now(UTC), message_id=f"{self._run}-{next(self._counter)}")
            await self._hand_over(msg)
        return True

    async def _prompt_loop(self) -> None:
        from adapters.line_editing import LineEditor

        self._editor = LineEditor(f"{self.user}> ", history_path=self._history_path, commands=self._command_names,
                                  busy=lambda: self._thinking > 0, cancel=self._cancel_reply)
        try:
            async with self._editor.open():
                while (text := await self._editor.read()) is not None:
                    if not await self._line(clean_text(text)):
                        break
        finally:
            self._editor = None
            self.closed.set()

    def _command_names(self) -> list[str]:
        return [*self._menu, *(name for name, _ in self.local_commands())]

    def set_command_menu(self, commands: Sequence[MenuCommand]) -> None:
        """The gateway's commands: what Tab completes after a "/"."""
        self._menu = [c.name for c in commands]

    def _cancel_reply(self) -> None:
        """Ctrl-C while a reply is written: the gateway stops that turn (the message stays in memory)."""
        if self.on_cancel is None:
            return
        task = asyncio.get_running_loop().create_task(self._cancel_and_say())
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)

    async def _cancel_and_say(self) -> None:
        assert self.on_cancel is not None
        if await self.on_cancel(self.name, self.user):
            async with self._write_lock:
                self._write("(reply cancelled; what you said is kept in memory)\n\n")

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
                line = await lines.get()
                if not line or not await self._line(line.rstrip("\n")):
                    break
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
                path = Path(reply.document.filename).resolve()
                write_private(path, reply.document.data)  # someone's memories: 0600
                text = f"{text}\n(saved to {path})"
            draft = self._draft if self._draft is not None and self._draft.chat_id == reply.chat_id else None
            if draft is not None:
                self._draft = None
                if self._editor is not None:
                    self._editor.show_draft(None)   # the finished reply is printed where the draft was
                elif draft.printed and text.startswith(draft.printed):
                    self._write(f"{text[len(draft.printed):]}\n\n")
                    return
                elif draft.printed:
                    self._write("\n")   # the model started over: the finished reply on a line of its own
            self._write(f"{self.bot_name}: {text}\n\n")

    # --- a reply being written (bot.channel.ShowsDrafts) -----------------------------------------
    def open_draft(self, reply: Reply, handles: Sequence[str] = ()) -> ConsoleDraft:
        return ConsoleDraft(self, reply.chat_id)

    async def show_draft(self, draft: ConsoleDraft, text: str) -> None:
        """The reply so far: above the prompt on a terminal; into a pipe, the words not yet written."""
        async with self._write_lock:
            self._draft = draft
            if self._tty:
                if self._editor is not None:
                    self._editor.show_draft(f"{self.bot_name}: {text}")
                return
            if draft.printed and text.startswith(draft.printed):
                self._write(text[len(draft.printed):])
            else:
                self._write(("\n" if draft.printed else "") + f"{self.bot_name}: {text}")
            draft.printed = text

    async def end_draft(self, draft: ConsoleDraft) -> None:
        """The reply was cancelled: its draft goes (what a pipe got stays, its line ended)."""
        async with self._write_lock:
            if self._draft is not draft:
                return
            self._draft = None
            if self._editor is not None:
                self._editor.show_draft(None)
            elif draft.printed:
                self._write("\n\n")

    @asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        if not self._tty:
            yield
            return
        self._thinking += 1
        if self._editor is not None:
            self._editor.start_thinking()
        task = asyncio.create_task(self._spin())
        try:
            yield
        finally:
            self._thinking -= 1
            task.cancel()
            if self._editor is not None:
                self._editor.stop_thinking()

    async def _spin(self) -> None:
        while True:
            if self._editor is not None:
                self._editor.tick()
            await asyncio.sleep(0.1)

    def _redraw(self) -> None:
        if self._editor is not None:
            self._editor.redraw()

    def _write(self, text: str) -> None:
        # Looked up at each write: while the prompt runs, sys.stdout is prompt_toolkit's proxy that
        # prints above the prompt.
        out = sys.stdout if self._own_stdout else self._out
        try:
            out.write(text)
        except UnicodeEncodeError:  # a terminal that cannot show some characters still gets the rest
            enc = getattr(out, "encoding", None) or "utf-8"
            out.write(clean_text(text).encode(enc, "replace").decode(enc))
        out.flush()
