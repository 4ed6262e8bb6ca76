"""The terminal's line editor: what a person at a terminal types, and what Ctrl-C means there.

One module for every chat that reads a terminal: the in-process terminal channel
(adapters/console.py) and a chat attached to a running gateway. It owns the prompt_toolkit
session (editing, history file, Tab completion of `/commands`, a spinner beside the prompt while
a reply is written) and the keys' meaning:

- Ctrl-C with text on the line clears the line (nothing is sent);
- Ctrl-C on an empty line while a reply is being written cancels that reply (`cancel`);
- Ctrl-C on an empty line with nothing in flight, and Ctrl-D on an empty line, leave.

A reply being written is shown above the prompt, redrawn in place as it grows (`show_draft`):
text printed above a prompt cannot be changed, and half a line printed there is drawn over by the
prompt. The finished reply is then printed above as usual, where the draft was.

The editor knows nothing of messages or the gateway: it reads lines, and asks `busy()` and
`cancel()` of whoever owns the conversation.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@contextmanager
def _stdout_as(stream) -> Iterator[None]:
    saved, sys.stdout = sys.stdout, stream
    try:
        yield
    finally:
        sys.stdout = saved


def slash_completions(typed: str, names: Iterable[str]) -> list[str]:
    """The `/commands` that complete `typed` (the text before the cursor), sorted; none unless
    the line is a single word starting with "/" (a message is never completed)."""
    if not typed.startswith("/") or any(ch.isspace() for ch in typed):
        return []
    word = typed[1:].lower()
    return sorted({f"/{n}" for n in names if n and n.lower().startswith(word)})


def draft_tail(text: str, columns: int, rows: int) -> str:
    """The last `rows` lines of `text` wrapped at `columns` (wide characters count two)."""
    from prompt_toolkit.utils import get_cwidth

    columns = max(1, columns)
    lines: list[str] = []
    for paragraph in text.expandtabs(4).split("\n"):
        line: list[str] = []
        width = 0
        for ch in paragraph:
            w = get_cwidth(ch) if ch.isprintable() else 2   # prompt_toolkit shows a control character as ^X
            if width + w > columns and line:
                lines.append("".join(line))
                line, width = [], 0
            line.append(ch)
            width += w
        lines.append("".join(line))
    return "\n".join(lines[-rows:])


class LineEditor:
    """Reads lines from a terminal with prompt_toolkit; `read()` inside `async with editor.open()`.

    `commands()` names the `/commands` Tab completes (without the slash); `busy()` says whether a
    reply is being written now, and `cancel()` stops it (called on the loop, from the key)."""

    def __init__(self, prompt: str, *, history_path: Path | None = None,
                 commands: Callable[[], Iterable[str]] = tuple, busy: Callable[[], bool] = lambda: False,
                 cancel: Callable[[], None] = lambda: None) -> None:
        self.prompt = prompt
        self._history_path = history_path
        self._commands = commands
        self._busy = busy
        self._cancel = cancel
        self._session = None
        self._thinking = 0
        self._frame = 0
        self._draft: str | None = None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[LineEditor]:
        """The terminal in the editor's hands: raw mode from the first prompt to the last, and
        what is printed meanwhile (replies) drawn above the prompt."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.patch_stdout import StdoutProxy
        from prompt_toolkit.shortcuts import CompleteStyle

        history = InMemoryHistory()
        if self._history_path is not None:
            # What the person typed is theirs alone: the file is created readable by them only.
            self._history_path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self._history_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            history = FileHistory(str(self._history_path))
        # Tab lists the candidates above the prompt as readline does (a floating menu would sit
        # over the replies); only Tab completes, typing never pops anything up.
        self._session = PromptSession(history=history, key_bindings=self._keys(), completer=self._completer(),
                                      complete_style=CompleteStyle.READLINE_LIKE, complete_while_typing=False)
        try:
            # Only stdout goes above the prompt: stderr is where libraries log, and the CLI points
            # it at the log file. The terminal stays in raw mode between two prompts too (while a
            # line is handed over): the kernel's line discipline would otherwise take what is typed
            # there, and a Ctrl-C or Ctrl-D in that gap would be a signal or an end-of-file no
            # prompt sees. In raw mode type-ahead waits as bytes for the next prompt.
            with StdoutProxy(raw=True) as proxy, _stdout_as(proxy), self._session.input.raw_mode():
                yield self
        finally:
            self._session = None

    async def read(self) -> str | None:
        """The next line typed; None when the person leaves (Ctrl-D, or Ctrl-C on an empty line
        with no reply in flight)."""
        assert self._session is not None, "read() inside `async with editor.open()`"
        try:
            # Not prompt_toolkit's loop exception handler: it takes the terminal over with "Press
            # ENTER to continue" for any stray error of any task, eating the keys typed meanwhile.
            # The process's own handler logs them (bot/logs.py).
            return await self._session.prompt_async(self._message, rprompt=self._rprompt, set_exception_handler=False)
        except (EOFError, KeyboardInterrupt):
            return None

    def _keys(self):
        from prompt_toolkit.key_binding import KeyBindings

        keys = KeyBindings()

        # Added after prompt_toolkit's own bindings, so these win over its "Ctrl-C aborts".
        @keys.add("c-c")
        def _ctrl_c(event) -> None:
            buffer = event.app.current_buffer
            if buffer.text:
                buffer.reset()
            elif self._busy():
                self._cancel()
            else:
                event.app.exit(exception=EOFError())

        return keys

    def _completer(self):
        from prompt_toolkit.completion import Completer, Completion

        names = self._commands

        class SlashCommands(Completer):
            def get_completions(self, document, complete_event):
                typed = document.text_before_cursor
                for name in slash_completions(typed, names()):
                    yield Completion(name, start_position=-len(typed))

        return SlashCommands()

    # --- the spinner while a reply is written -----------------------------------------------
    @property
    def thinking(self) -> bool:
        return self._thinking > 0

    def start_thinking(self) -> None:
        self._thinking += 1
        self.redraw()

    def stop_thinking(self) -> None:
        self._thinking = max(0, self._thinking - 1)
        self.redraw()

    def tick(self) -> None:
        """The spinner's next frame."""
        self._frame += 1
        self.redraw()

    def _rprompt(self) -> str:
        return f"{SPINNER[self._frame % len(SPINNER)]} thinking…" if self._thinking else ""

    # --- the reply being written --------------------------------------------------------------
    def show_draft(self, text: str | None) -> None:
        """Show `text` (the reply so far) above the prompt, in place of the last; None: none."""
        self._draft = text or None
        self.redraw()

    def _message(self) -> str:
        if self._draft is None or self._session is None:
            return self.prompt
        size = self._session.app.output.get_size()
        # What fits above the prompt: its last lines, as the terminal would wrap them.
        return draft_tail(self._draft, size.columns, max(1, size.rows - 2)) + "\n" + self.prompt

    def redraw(self) -> None:
        session = self._session
        if session is not None and session.app.is_running:
            session.app.invalidate()
