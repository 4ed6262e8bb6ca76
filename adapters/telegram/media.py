"""Fetching what came with a Telegram message: getFile, then the download, both capped.

Telegram says a file's size in the update and again in getFile's answer, so an oversized file is
refused before a byte of it is downloaded (the Bot API itself serves at most 20 MB); the download
is checked again, and the whole fetch is bounded by `timeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from telegram import Bot
from telegram.error import TelegramError

from bot.errors import MediaError
from bot.message import Media

__all__ = ["fetch_file"]


async def fetch_file(bot: Bot, media: Media, *, max_bytes: int, timeout: float,
                     safe: Callable[[BaseException], str] = str) -> bytes:
    """The bytes of `media` (its `ref` is a Telegram file id); MediaError when it cannot be had."""
    if media.size is not None and media.size > max_bytes:
        raise MediaError(f"{media.size} bytes, over the {max_bytes}-byte cap", too_large=True)
    try:
        async with asyncio.timeout(timeout):
            file = await bot.get_file(media.ref, read_timeout=timeout)
            if file.file_size is not None and file.file_size > max_bytes:
                raise MediaError(f"{file.file_size} bytes, over the {max_bytes}-byte cap", too_large=True)
            data = bytes(await file.download_as_bytearray(read_timeout=timeout))
    except TimeoutError:
        raise MediaError(f"Telegram did not send the file within {timeout:g} s") from None
    except TelegramError as exc:
        # "File is too big" is getFile's answer past the Bot API's own 20 MB limit.
        too_big = "too big" in str(exc).lower()
        raise MediaError(f"Telegram refused the file: {safe(exc)}", too_large=too_big) from None
    if len(data) > max_bytes:
        raise MediaError(f"{len(data)} bytes, over the {max_bytes}-byte cap", too_large=True)
    return data
