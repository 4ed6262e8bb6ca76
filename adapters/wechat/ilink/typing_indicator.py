"""WeChat's "typing..." for one user while the agent works: a typing_ticket from getconfig (cached
per user, 6 h; after a failure typing is skipped for a minute), sendtyping at the start, again
every few seconds (WeChat's indicator fades) for at most five minutes, and a cancel at the end.

A typing hint is never worth a failed turn: every failure is logged and swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from adapters.wechat.ilink import protocol as proto
from adapters.wechat.ilink.client import TransportError
from adapters.wechat.ilink.protocol import TypingStatus

__all__ = ["TypingIndicator"]

log = logging.getLogger(__name__)

TYPING_TICKET_TTL_S = 6 * 3600.0
TYPING_RETRY_S = 60.0  # after a failed getconfig, typing is skipped for this long
TYPING_MAX_S = 300.0  # the keep-alive gives up after this, whatever the agent does

Post = Callable[[str, dict[str, Any], float], Awaitable[Any]]


class TypingIndicator:
    """Typing tickets per user and the keep-alive; `post` is the adapter's bot call."""

    def __init__(self, name: str, post: Post, *, context_token: Callable[[str], str | None], running: Callable[[], bool],
                 client_version: str, interval: float, request_timeout: float) -> None:
        self.name = name
        self._post = post
        self._context_token = context_token
        self._running = running            # False while the adapter has no connection
        self._client_version = client_version
        self._interval = interval
        self._request_timeout = request_timeout
        self._tickets: dict[str, tuple[str, float]] = {}

    def forget_tickets(self) -> None:
        """Drop every cached ticket (they belong to the login that fetched them)."""
        self._tickets.clear()

    @contextlib.asynccontextmanager
    async def shown_to(self, user: str) -> AsyncIterator[None]:
        """Show "typing..." to `user` while the block runs; failures are logged, never raised."""
        ticket = await self._ticket(user)
        keepalive: asyncio.Task[None] | None = None
        if ticket:
            await self._send(user, ticket, TypingStatus.TYPING)
            keepalive = asyncio.create_task(self._keepalive(user, ticket), name=f"{self.name}-typing")
        try:
            yield
        finally:
            if keepalive is not None:
                keepalive.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keepalive
            if ticket:
                await self._send(user, ticket, TypingStatus.CANCEL)

    async def _ticket(self, user: str) -> str:
        """The user's typing_ticket from getconfig, cached; "" when there is none."""
        loop = asyncio.get_running_loop()
        cached = self._tickets.get(user)
        if cached and loop.time() < cached[1]:
            return cached[0]
        if not self._running():
            return ""
        body = proto.getconfig_body(user, self._context_token(user), self._client_version)
        try:
            payload = await self._post(proto.GET_CONFIG, body, self._request_timeout)
        except TransportError as exc:
            log.warning("wechat: getconfig failed (%s); no typing indicator for now", exc)
            self._tickets[user] = ("", loop.time() + TYPING_RETRY_S)
            return ""
        ticket = payload.get("typing_ticket") if isinstance(payload, dict) else None
        if not proto.parse_status(payload).ok or not isinstance(ticket, str) or not ticket:
            log.warning("wechat: getconfig gave no typing_ticket; no typing indicator for now")
            self._tickets[user] = ("", loop.time() + TYPING_RETRY_S)
            return ""
        self._tickets[user] = (ticket, loop.time() + TYPING_TICKET_TTL_S)
        return ticket

    async def _send(self, user: str, ticket: str, status: TypingStatus) -> None:
        if not self._running():
            return
        body = proto.sendtyping_body(user, ticket, status, self._client_version)
        try:
            payload = await self._post(proto.SEND_TYPING, body, self._request_timeout)
        except TransportError as exc:
            log.warning("wechat: sendtyping failed (%s)", exc)
            return
        if not proto.parse_status(payload).ok:
            log.warning("wechat: sendtyping refused; the typing ticket is dropped")
            self._tickets.pop(user, None)

    async def _keepalive(self, user: str, ticket: str) -> None:
        """WeChat's indicator fades after a few seconds: repeat it while the agent works."""
        elapsed = 0.0
        while elapsed < TYPING_MAX_S:
            await asyncio.sleep(self._interval)
            elapsed += self._interval
            await self._send(user, ticket, TypingStatus.TYPING)
