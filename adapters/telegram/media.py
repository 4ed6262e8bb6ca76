"""Fetching what came with a Telegram message: getFile, then the download, both capped.

Telegram says a file's size in the update and again in getFile's answer, so an oversized file is
refused before a byte of it is downloaded (the Bot API itself serves at most 20 MB); the download
is streamed and abandoned as soon as it passes the cap, whatever size was announced, and the whole
fetch is bounded by `timeout`.

Where the bytes may come from is ours to decide, not the Bot API's answer's: a relative
`file_path` is downloaded from the configured server's file address (`FileSource.base_file_url`,
derived from `base_url` when not set), and an absolute one (a local Bot API server in `--local`
mode answers with its own disk path) is read only when `local_dir` names the folder that server
keeps its files in, and only inside it, symlinks resolved. python-telegram-bot would read any
local path getFile names (the gateway's own secrets included), so its download is never used.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from telegram import Bot
from telegram.error import TelegramError

from adapters.download import collect_capped
from bot.errors import MediaError
from bot.message import Media

__all__ = ["TELEGRAM_FILE_URL", "FileSource", "fetch_file", "file_base_url"]

TELEGRAM_FILE_URL = "https://api.telegram.org/file/bot"


def file_base_url(base_url: str | None, base_file_url: str | None = None) -> str:
    """Where downloads go (GET <this><token>/<file_path>): `base_file_url` as given, else the file
    address of the `base_url` server (…/bot -> …/file/bot, the Bot API's layout), else Telegram's."""
    if base_file_url:
        return base_file_url
    if not base_url:
        return TELEGRAM_FILE_URL
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    path = (path[: -len("/bot")] if path.endswith("/bot") else path) + "/file/bot"
    return urlunsplit(parts._replace(path=path, query="", fragment=""))


@dataclass(frozen=True)
class FileSource:
    """Where a file's bytes may be read: the server's file address, and a local folder only in
    local mode (`[channels.telegram] local_mode` with `local_dir`)."""

    base_file_url: str
    local_dir: Path | None = None


def _too_big(size: int | None, max_bytes: int) -> MediaError:
    said = f"{size} bytes" if size is not None else "more bytes than announced"
    return MediaError(f"{said}, over the {max_bytes}-byte cap", too_large=True, size=size)


async def fetch_file(bot: Bot, http: httpx.AsyncClient, source: FileSource, media: Media, *, max_bytes: int,
                     timeout: float, safe: Callable[[BaseException], str] = str) -> bytes:
    """The bytes of `media` (its `ref` is a Telegram file id); MediaError when it cannot be had."""
    if media.size is not None and media.size > max_bytes:
        raise _too_big(media.size, max_bytes)
    try:
        async with asyncio.timeout(timeout):
            file = await bot.get_file(media.ref, read_timeout=timeout)
            if file.file_size is not None and file.file_size > max_bytes:
                raise _too_big(file.file_size, max_bytes)
            path = file.file_path or ""
            # python-telegram-bot has put its file address before every path that is not a file
            # on this machine; what it left alone is a local path.
            served = bot.base_file_url + "/"
            if path.startswith(served):
                return await _download(http, served + quote(path[len(served):]), max_bytes)
            if not path:
                raise MediaError("getFile gave no file_path")
            return await asyncio.to_thread(_read_local, source.local_dir, path, max_bytes)
    except TimeoutError:
        raise MediaError(f"Telegram did not send the file within {timeout:g} s") from None
    except TelegramError as exc:
        # "File is too big" is getFile's answer past the Bot API's own 20 MB limit.
        too_big = "too big" in str(exc).lower()
        raise MediaError(f"Telegram refused the file: {safe(exc)}", too_large=too_big) from None
    except httpx.HTTPError as exc:  # its message may quote the URL, which holds the token
        raise MediaError(f"the file download failed ({type(exc).__name__})") from None


async def _download(http: httpx.AsyncClient, url: str, max_bytes: int) -> bytes:
    async with http.stream("GET", url) as resp:
        if resp.status_code != 200:
            raise MediaError(f"the file download answered HTTP {resp.status_code}")
        length = resp.headers.get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            raise _too_big(None, max_bytes)
        return await collect_capped(resp.aiter_bytes(65536), max_bytes)


def _read_local(folder: Path | None, path: str, max_bytes: int) -> bytes:
    """A file a local Bot API server named by its path: only inside `folder` (symlinks resolved)."""
    if folder is None:
        raise MediaError("the Bot API answered getFile with a local path, and [channels.telegram] local_mode is "
                         "off: the file is not read (set local_mode and local_dir for a local Bot API server)")
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(Path(os.path.realpath(folder))):
        raise MediaError("the Bot API answered getFile with a path outside [channels.telegram] local_dir: "
                         "the file is not read")
    if not real.is_file():  # a folder, a FIFO that would block the read, a device
        raise MediaError("the Bot API named a local path that is not a regular file")
    try:
        with open(real, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise MediaError(f"the local file could not be read ({type(exc).__name__})") from None
    if len(data) > max_bytes:
        raise _too_big(None, max_bytes)
    return data
