"""A real pseudo-terminal for terminal-facing tests: pexpect runs the process, pyte keeps the
screen as a person would see it (80x24), and every wait runs on the test's event loop (the
fakes the process talks to live on that loop too)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pexpect
import pyte

ROOT = str(Path(__file__).resolve().parents[2])
COLS, ROWS = 80, 24


class _Screen:
    def __init__(self) -> None:
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.Stream(self.screen)
        # The same output on a screen tall enough never to scroll: the whole session, for a transcript.
        self.tall = pyte.Screen(COLS, 1000)
        self.tall_stream = pyte.Stream(self.tall)
        self.raw: list[str] = []

    def write(self, data: str) -> None:
        self.raw.append(data)
        self.stream.feed(data)
        self.tall_stream.feed(data)

    def flush(self) -> None:
        pass


class Tty:
    """One process on a pty; `screen_lines()` is what the terminal shows right now."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: str = ROOT) -> None:
        self._screen = _Screen()
        self.child = pexpect.spawn(sys.executable, args, env=env, cwd=cwd, encoding="utf-8", codec_errors="replace",
                                   dimensions=(ROWS, COLS), timeout=300)
        self.child.logfile_read = self._screen

    async def expect(self, pattern, timeout: float = 300) -> str:
        """Wait for `pattern` (a regex, or a list of them) in the output; returns what matched."""
        await self.child.expect(pattern, timeout=timeout, async_=True)
        return self.child.after if isinstance(self.child.after, str) else ""

    async def expect_exact(self, text: str, timeout: float = 300) -> None:
        await self.child.expect_exact(text, timeout=timeout, async_=True)

    async def wait_screen(self, predicate, what: str, timeout: float = 300) -> None:
        """Read output until the screen satisfies `predicate(lines)` (a terminal redraws in place,
        so what a person sees is the screen, not the byte stream)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self.screen_lines()):
            if loop.time() > deadline:
                raise AssertionError(f"the screen never showed {what}:\n{self.screen()}")
            # pexpect answers from its buffer without yielding: give the loop (and the fakes on it) a turn.
            # Everything buffered at once (a redraw is thousands of bytes; one by one falls behind).
            await asyncio.sleep(0)
            if await self.child.expect([pexpect.TIMEOUT, pexpect.EOF, r"[\s\S]+"], timeout=0.2, async_=True) == 1:
                if not predicate(self.screen_lines()):
                    raise AssertionError(f"the process ended before the screen showed {what}:\n{self.screen()}")
                return

    async def prompt(self, prompt: str, timeout: float = 300) -> None:
        """Wait until the cursor sits on an empty `prompt` line (the prompt is back and ready)."""
        await self.wait_screen(lambda lines: self.cursor_line() == prompt.rstrip(), f"the prompt {prompt!r}", timeout)

    async def shows(self, text: str, timeout: float = 300) -> None:
        await self.wait_screen(lambda lines: any(text in line for line in lines), repr(text), timeout)

    def send(self, text: str) -> None:
        self.child.send(text)

    async def answers(self, *steps: tuple[str, object]) -> None:
        """A dialogue: for each step wait until `shown` is on the screen, then type `typed` (as text) and
        Enter (None: type nothing, only wait)."""
        for shown, typed in steps:
            await self.shows(shown)
            if typed is not None:
                self.send(f"{typed}\r")

    def screen_lines(self) -> list[str]:
        return [line.rstrip() for line in self._screen.screen.display]

    def screen(self) -> str:
        lines = self.screen_lines()
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)

    def transcript(self) -> str:
        """Everything the session showed, top to bottom (as if the terminal never scrolled)."""
        lines = [line.rstrip() for line in self._screen.tall.display]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)

    def cursor_line(self) -> str:
        return self._screen.screen.display[self._screen.screen.cursor.y].rstrip()

    async def exit_status(self, timeout: float = 300) -> int:
        """Wait for the process to end (reading what it still prints) and return its status."""
        await self.child.expect(pexpect.EOF, timeout=timeout, async_=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.child.isalive():
            if loop.time() > deadline:
                raise AssertionError("the process printed EOF but did not exit")
            await asyncio.sleep(0.05)
        self.child.close()
        if self.child.signalstatus is not None:
            raise AssertionError(f"killed by signal {self.child.signalstatus}")
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def tty_env(tmp: Path, llm_base: str | None, **extra: str) -> dict[str, str]:
    """A memgate environment of its own (data folder, empty config) on a pty-friendly terminal."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_", "WECHAT_"))}
    (tmp / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp / "none.toml"),
                "TERM": "xterm", "COLUMNS": str(COLS), "LINES": str(ROWS),
                # pyte does not answer cursor-position requests; do not make the prompt wait for one.
                "PROMPT_TOOLKIT_NO_CPR": "1"})
    if llm_base:
        env.update({"MEMGATE_LLM_API_BASE": llm_base, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0"})
    env.update(extra)
    return env
