"""One capped download over HTTP for the adapters that fetch attachments by URL (WeChat's CDN,
an Official Account's PicUrl): a declared length over the cap is refused before reading, and
the body is read in chunks and abandoned as soon as it passes the cap; the whole fetch is bounded
by `timeout`. Failures are MediaError (`too_large` when the cap was the reason)."""

from __future__ import annotations

import aiohttp

from bot.errors import MediaError

__all__ = ["fetch_url", "read_capped"]


async def read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body of an answer, read in chunks and abandoned as soon as it passes `max_bytes`."""
    body = bytearray()
    async for chunk in resp.content.iter_chunked(65536):
        body += chunk
        if len(body) > max_bytes:
            raise MediaError(f"over the {max_bytes}-byte cap", too_large=True)
    return bytes(body)


async def fetch_url(http: aiohttp.ClientSession, url: str, *, max_bytes: int, timeout: float, what: str) -> bytes:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False) as resp:
            if resp.status != 200:
                raise MediaError(f"{what} answered HTTP {resp.status}")
            if (resp.content_length or 0) > max_bytes:
                raise MediaError(f"{resp.content_length} bytes, over the {max_bytes}-byte cap", too_large=True)
            return await read_capped(resp, max_bytes)
    except TimeoutError:
        raise MediaError(f"{what} did not send the file within {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise MediaError(f"{what}: {type(exc).__name__}") from None
