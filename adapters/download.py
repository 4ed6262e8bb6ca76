"""One capped download over HTTP for the adapters that fetch attachments by URL (WeChat's CDN,
an Official Account's PicUrl and media/get; Telegram streams through httpx into `collect_capped`):
a declared length over the cap is refused before reading, and the body is read in chunks and
abandoned as soon as it passes the cap; the whole fetch is bounded by `timeout`. Failures are
MediaError (`too_large` when the cap was the reason)."""

from __future__ import annotations

from collections.abc import AsyncIterable

import aiohttp

from bot.errors import MediaError

__all__ = ["collect_capped", "fetch_url", "read_capped"]


async def collect_capped(chunks: AsyncIterable[bytes], max_bytes: int) -> bytes:
    """A body as it arrives, abandoned as soon as it passes `max_bytes` (whatever length was
    announced: a server may say 1,000 bytes and send 300 MB)."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            raise MediaError(f"more than announced, over the {max_bytes}-byte cap", too_large=True)
    return bytes(body)


async def read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body of an aiohttp answer, read in chunks and abandoned as soon as it passes `max_bytes`."""
    return await collect_capped(resp.content.iter_chunked(65536), max_bytes)


async def fetch_url(http: aiohttp.ClientSession, url: str, *, max_bytes: int, timeout: float, what: str) -> bytes:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False) as resp:
            if resp.status != 200:
                raise MediaError(f"{what} answered HTTP {resp.status}")
            if (resp.content_length or 0) > max_bytes:
                raise MediaError(f"{resp.content_length} bytes, over the {max_bytes}-byte cap", too_large=True,
                                 size=resp.content_length)
            return await read_capped(resp, max_bytes)
    except TimeoutError:
        raise MediaError(f"{what} did not send the file within {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise MediaError(f"{what}: {type(exc).__name__}") from None
