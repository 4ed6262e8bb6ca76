"""Where memgate's log records go: the rotating memgate.log in the data folder and/or stderr,
and nowhere near the prompt while a person chats in this terminal."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from logging.handlers import RotatingFileHandler
from pathlib import Path

from bot.settings import Settings
from memory.private_files import open_private, private_dir


class _KeyValueFormatter(logging.Formatter):
    """One line per record: time level logger msg (structured enough for grep, no secrets)."""

    def format(self, record: logging.LogRecord) -> str:
        base = f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')} level={record.levelname} logger={record.name} msg={record.getMessage()!r}"
        if record.exc_info:
            base += "\n" + self.formatException(record.exc_info)
        return base


def log_file(settings: Settings) -> Path:
    return settings.data_path / "memgate.log"


class _PrivateRotatingFileHandler(RotatingFileHandler):
    """A rotating log file created (and reopened after each rotation) 0600: it holds turn ids,
    names and at DEBUG message bodies."""

    def _open(self):
        return open_private(self.baseFilename, "a", encoding=self.encoding)


def setup_logging(settings: Settings, *, to_file: bool, to_stderr: bool | int = True) -> None:
    """Log records to the rotating log file in the data folder and/or to stderr.

    `to_stderr`: True = every record, a level = from that level up, False = none (the terminal
    is the chat: nothing may be printed into the prompt)."""
    root = logging.getLogger()
    root.handlers.clear()
    level = getattr(logging, settings.log_level.upper(), logging.INFO)
    fmt = _KeyValueFormatter()
    if to_file:
        private_dir(settings.data_path)
        # Rotated by size so an always-on bot cannot fill the disk with its log.
        fh = _PrivateRotatingFileHandler(log_file(settings), maxBytes=int(settings.log_max_mb * 1024 * 1024),
                                 backupCount=settings.log_backups, encoding="utf-8")
        fh.setFormatter(fmt)
        fh.setLevel(level)
        root.addHandler(fh)
    if to_stderr is not False:
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(fmt)
        if to_stderr is not True:
            sh.setLevel(to_stderr)
        root.addHandler(sh)
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "LiteLLM", "litellm", "telegram", "apscheduler", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_loop_exceptions(loop) -> None:
    """What no task handled goes to the log, with its traceback, and not onto the terminal."""
    logger = logging.getLogger("bot.loop")

    def handler(_loop, context: dict) -> None:
        exc = context.get("exception")
        where = context.get("task") or context.get("future") or context.get("handle") or ""
        logger.error("unhandled in the event loop: %s %s", context.get("message", ""), where,
                     exc_info=(type(exc), exc, exc.__traceback__) if exc else None)

    loop.set_exception_handler(handler)


@contextmanager
def terminal_session(settings: Settings, console) -> Iterator[None]:
    """While a person chats in this terminal: logs go to the log file only, and so does anything a
    library prints to stderr on its own (file descriptor 2 points there), so nothing is written
    into the prompt. Errors after the session are printed to the real stderr again."""
    if console is None or not console.interactive:
        yield
        return
    setup_logging(settings, to_file=True, to_stderr=False)
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log_file(settings), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
