"""The Official Account customer-service API: access-token cache and `message/custom/send`.

What the callback cannot carry (a slow reply, the parts after the first, a passive reply WeChat
gave up on) goes out here. The token comes from `cgi-bin/token` (client_credential), is cached
and refreshed ahead of expiry, and is fetched again once when WeChat says it is invalid.
Neither the app secret nor a token is ever logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Protocol

import aiohttp

from bot.errors import ChannelError

__all__ = ["API_TIMEOUT_S", "ApiCounters", "CustomerServiceClient", "MonotonicClock"]

logger = logging.getLogger(__name__)

API_TIMEOUT_S = 10.0
_API_TIMEOUT = aiohttp.ClientTimeout(total=API_TIMEOUT_S)
_TOKEN_MARGIN_S = 300.0  # refresh the access token this long before it expires
_TOKEN_ERRCODES = frozenset({40001, 40014, 42001})  # invalid / malformed / expired access token


class MonotonicClock(Protocol):
    """Monotonic seconds for the token's lifetime (tests move it)."""

    def monotonic(self) -> float: ...


class ApiCounters(Protocol):
    """Where the client counts what it did (the adapter's WechatMpStats)."""

    api_messages: int
    token_fetches: int


class CustomerServiceClient:
    """Access-token cache and the customer-service text API. Neither the secret nor a token is ever logged."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        api_base: str,
        app_id: str,
        app_secret: str,
        clock: MonotonicClock,
        stats: ApiCounters,
    ) -> None:
        self._session = session
        self._base = api_base.rstrip("/")
        self._app_id = app_id
        self._app_secret = app_secret
        self._clock = clock
        self._stats = stats
        self._lock = asyncio.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0

    async def send_text(self, openid: str, content: str) -> None:
        """Send one text message; refresh the token once if WeChat says it is invalid or expired."""
        token = await self._access_token()
        errcode = await self._post_text(token, openid, content)
        if errcode in _TOKEN_ERRCODES:
            logger.info("wechat_mp: access token rejected (errcode %s), fetching a new one", errcode)
            token = await self._access_token(stale=token)
            errcode = await self._post_text(token, openid, content)
        if errcode != 0:
            raise ChannelError(f"wechat_mp: customer-service send refused (errcode {errcode})")
        self._stats.api_messages += 1

    async def _access_token(self, *, stale: str | None = None) -> str:
        """The cached token, fetched again when near expiry or when `stale` was just refused."""
        async with self._lock:
            current = self._token
            # Reuse it while fresh, or when a concurrent send already replaced the refused one.
            if current is not None and current != stale:
                if stale is not None or self._clock.monotonic() < self._refresh_at:
                    return current
            params = {"grant_type": "client_credential", "appid": self._app_id, "secret": self._app_secret}
            data = await self._call("GET", "/cgi-bin/token", params=params)
            token, expires_in = data.get("access_token"), data.get("expires_in", 7200)
            if not isinstance(token, str) or not token:
                raise ChannelError(f"wechat_mp: access token refused (errcode {data.get('errcode')})")
            lifetime = float(expires_in) if isinstance(expires_in, int | float) else 7200.0
            # Refresh ahead of expiry; a short-lived token still gets half its life.
            self._refresh_at = self._clock.monotonic() + lifetime - min(_TOKEN_MARGIN_S, lifetime / 2)
            self._token = token
            self._stats.token_fetches += 1
            logger.info("wechat_mp: access token fetched, valid %ss", int(lifetime))
            return token

    async def _post_text(self, token: str, openid: str, content: str) -> int:
        """POST one text message; returns WeChat's errcode (0 = delivered)."""
        payload = {"touser": openid, "msgtype": "text", "text": {"content": content}}
        # WeChat shows \\uXXXX escapes literally in some clients: send raw UTF-8.
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        data = await self._call(
            "POST",
            "/cgi-bin/message/custom/send",
            params={"access_token": token},
            data=body,
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        errcode = data.get("errcode", 0)
        return errcode if isinstance(errcode, int) else -1

    async def _call(self, method: str, path: str, **kwargs) -> dict:
        """One API call -> its JSON object; ChannelError on transport or decoding failure.

        The exception chain is cut (`from None`): aiohttp errors carry the full URL, whose query
        holds the app secret or access token, and must not reach a traceback in the logs.
        """
        try:
            async with self._session.request(method, self._base + path, timeout=_API_TIMEOUT, **kwargs) as resp:
                if resp.status != 200:
                    raise ChannelError(f"wechat_mp: {path} answered HTTP {resp.status}")
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ChannelError(f"wechat_mp: {path} failed ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise ChannelError(f"wechat_mp: {path} answered something other than a JSON object")
        return data
