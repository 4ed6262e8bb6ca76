"""One call of the iLink bot API: POST JSON with the login's headers to the bot's host; the decoded
answer, or TransportError when the call produced none (network, timeout, an HTTP status (with the
Retry-After a 429 / 503 asked), a body that is not JSON). What the answer says is the caller's to
read (protocol.parse_status)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import aiohttp

from adapters.download import read_capped
from adapters.retry_after import parse_retry_after
from adapters.wechat.ilink import protocol as proto
from bot.errors import MediaError

__all__ = ["TransportError", "post"]

_THROTTLED = frozenset({429, 503})


class TransportError(Exception):
    """A call that did not produce a JSON answer (network, timeout, HTTP status, bad body).

    `retry_after`: the seconds a 429 / 503 asked us to wait, when it said.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# An answer is JSON of messages (media come from the CDN, capped there): far above any real one,
# and what a server that misbehaves can make us hold (a 300 MB answer was read whole: issue 31).
MAX_ANSWER_BYTES = 8 * 1024 * 1024


async def post(http: aiohttp.ClientSession, base_url: str, bot_token: str, *, app_id: str, client_version: str,
               endpoint: str, body: dict[str, Any], timeout: float, max_bytes: int = MAX_ANSWER_BYTES) -> Any:
    """POST one bot call; the decoded JSON answer, or TransportError (also for an answer over
    `max_bytes`: abandoned as it passes the cap, whatever length it announced)."""
    headers = proto.post_headers(bot_token, app_id, client_version, proto.random_uin())
    try:
        async with http.post(
            f"{base_url}/{endpoint}",
            data=json.dumps(body).encode(),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            try:
                raw = await read_capped(resp, max_bytes)
            except MediaError:
                raise TransportError(f"{endpoint} answered more than {max_bytes} bytes") from None
            if resp.status != 200:
                asked = None
                if resp.status in _THROTTLED:
                    asked = parse_retry_after(resp.headers.get("Retry-After"), datetime.now(UTC))
                raise TransportError(f"{endpoint} answered HTTP {resp.status}", asked)
    except TimeoutError as exc:
        raise TransportError(f"{endpoint} timed out") from exc
    except aiohttp.ClientError as exc:
        raise TransportError(f"{endpoint}: {type(exc).__name__}") from exc
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise TransportError(f"{endpoint} answered with something that is not JSON") from exc
