"""The Official Account customer-service API: access-token cache and `message/custom/send`.

What the callback cannot carry (a slow reply, the parts after the first, a passive reply WeChat
gave up on) goes out here. The token comes from `cgi-bin/token` (client_credential), is cached
and refreshed ahead of expiry, and is fetched again once when WeChat says it is invalid. A 429
or 503 is retried after the wait its Retry-After asks for (capped). A refusal (errcode != 0) is
an `ApiRefused` naming the errcode, for the adapter to tell the owner.
Neither the app secret nor a token is ever logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

import aiohttp

from adapters.download import read_capped
from adapters.retry_after import parse_retry_after, retry_delay
from bot.errors import ChannelError, MediaError

__all__ = ["API_TIMEOUT_S", "ApiCounters", "ApiRefused", "CustomerServiceClient", "MonotonicClock", "explain_errcode"]

logger = logging.getLogger(__name__)

API_TIMEOUT_S = 10.0
_API_TIMEOUT = aiohttp.ClientTimeout(total=API_TIMEOUT_S)
_TOKEN_MARGIN_S = 300.0  # refresh the access token this long before it expires
_TOKEN_ERRCODES = frozenset({40001, 40014, 42001})  # invalid / malformed / expired access token
_THROTTLED = frozenset({429, 503})  # HTTP statuses that mean "not now", with a Retry-After
THROTTLE_ATTEMPTS = 4  # one call and up to three retries after a 429/503
RETRY_AFTER_CAP_S = 30.0  # never wait longer than this on one Retry-After
_BACKOFF_S = 1.0  # the wait before the first retry when the server names none (doubles)
# What an errcode means to the owner, for the notice (the common refusals of custom/send).
_ERRCODE_MEANING = {
    40001: "the access token is invalid (check the app secret)",
    40013: "the app id is invalid",
    40125: "the app secret is wrong",
    40164: "this server's IP address is not on the account's IP whitelist",
    45009: "the daily API quota is used up",
    45015: "the reply time limit passed: the person has not written to the account within 48 hours",
    45047: "too many messages sent without the person writing back",
    48001: "the account is not authorised for this API (customer-service messages need a verified service account)",
}


def explain_errcode(errcode: int) -> str:
    """The errcode and, when known, what it means."""
    meaning = _ERRCODE_MEANING.get(errcode)
    return f"errcode {errcode} ({meaning})" if meaning else f"errcode {errcode}"


class ApiRefused(ChannelError):
    """WeChat answered the call with errcode != 0: it will not deliver, retrying as is will not help."""

    def __init__(self, what: str, errcode: int) -> None:
        self.errcode = errcode
        self.explanation = explain_errcode(errcode)
        # -1 is WeChat's "system busy" and 45009 its rate limit: those may pass later (the outbox retries).
        super().__init__(f"wechat_mp: {what} refused ({self.explanation})", permanent=errcode not in (-1, 45009))


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
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._session = session
        self._base = api_base.rstrip("/")
        self._app_id = app_id
        self._app_secret = app_secret
        self._clock = clock
        self._stats = stats
        self._sleep = sleep  # injected so tests see the waits Retry-After asked for
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
            raise ApiRefused("customer-service send", errcode)
        self._stats.api_messages += 1

    async def media_get(self, media_id: str, *, max_bytes: int, timeout: float) -> bytes:
        """A follower's temporary media (image, voice: 3 days) by MediaId, capped; MediaError when
        it cannot be had. A JSON answer is WeChat's refusal; a rejected token is refreshed once."""
        token = await self._access_token()
        for attempt in (1, 2):
            try:
                async with self._session.get(self._base + "/cgi-bin/media/get",
                                             params={"access_token": token, "media_id": media_id},
                                             timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                    if resp.status != 200:
                        raise MediaError(f"media/get answered HTTP {resp.status}")
                    if (resp.content_length or 0) > max_bytes:
                        raise MediaError(f"{resp.content_length} bytes, over the {max_bytes}-byte cap", too_large=True,
                                         size=resp.content_length)
                    if "json" in resp.content_type or resp.content_type.startswith("text/"):
                        answer = await resp.json(content_type=None)
                        errcode = answer.get("errcode", -1) if isinstance(answer, dict) else -1
                        if errcode in _TOKEN_ERRCODES and attempt == 1:
                            token = await self._access_token(stale=token)
                            continue
                        raise MediaError(f"media/get refused (errcode {errcode})")
                    return await read_capped(resp, max_bytes)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                # The URL holds the access token: the error says only what kind it was.
                raise MediaError(f"media/get failed ({type(exc).__name__})") from None
        raise MediaError("media/get refused the access token twice")

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
                errcode = data.get("errcode")
                raise ApiRefused("access token request", errcode if isinstance(errcode, int) else -1)
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

        A 429 or 503 is tried again after what its Retry-After asks (at least our own backoff,
        at most RETRY_AFTER_CAP_S), up to THROTTLE_ATTEMPTS calls in all.
        """
        for attempt in range(1, THROTTLE_ATTEMPTS + 1):
            status, retry_after, data = await self._request(method, path, **kwargs)
            if status not in _THROTTLED:
                break
            if attempt == THROTTLE_ATTEMPTS:
                raise ChannelError(f"wechat_mp: {path} answered HTTP {status} {attempt} times")
            asked = parse_retry_after(retry_after, datetime.now(UTC))
            delay = retry_delay(asked, _BACKOFF_S * 2 ** (attempt - 1), RETRY_AFTER_CAP_S)
            logger.warning("wechat_mp: %s answered HTTP %s (Retry-After %r); retrying in %.1f s",
                           path, status, retry_after, delay)
            await self._sleep(delay)
        if status != 200:
            raise ChannelError(f"wechat_mp: {path} answered HTTP {status}")
        if not isinstance(data, dict):
            raise ChannelError(f"wechat_mp: {path} answered something other than a JSON object")
        return data

    async def _request(self, method: str, path: str, **kwargs) -> tuple[int, str | None, object]:
        """One HTTP exchange -> (status, Retry-After header, decoded JSON of a 200 or None).

        The exception chain is cut (`from None`): aiohttp errors carry the full URL, whose query
        holds the app secret or access token, and must not reach a traceback in the logs.
        """
        try:
            async with self._session.request(method, self._base + path, timeout=_API_TIMEOUT, **kwargs) as resp:
                if resp.status != 200:
                    return resp.status, resp.headers.get("Retry-After"), None
                return 200, None, await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ChannelError(f"wechat_mp: {path} failed ({type(exc).__name__})") from None
