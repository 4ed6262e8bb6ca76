"""A `Reply` as iLink `sendmessage` calls: plain text (WeChat shows no markdown) in parts of at most
4000 characters, each echoing the user's latest `context_token`, retried with the same client_id
(the server de-duplicates, so a lost answer cannot double-send) after what a 429 / 503 asked.

A reply WeChat will not deliver (ret -2: the user has not written within the 24 h window; another
refusal; an expired login) is a ChannelError that says whether a retry can help, and the owner is
told (throttled) through the channel's trouble hook.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from adapters.plaintext import markdown_to_plain
from adapters.retry_after import retry_delay
from adapters.split import split_message
from adapters.wechat.ilink import protocol as proto
from adapters.wechat.ilink.client import TransportError
from bot.errors import ChannelError
from bot.message import Reply

__all__ = ["LOGIN_HINT", "RETRY_AFTER_CAP_S", "SEND_ATTEMPTS", "TEXT_LIMIT", "Sender", "split_reply", "text_parts"]

log = logging.getLogger(__name__)

TEXT_LIMIT = 4000
LOGIN_HINT = "run `memgate wechat login` and scan the QR code with WeChat"
SEND_ATTEMPTS = 3
RETRY_AFTER_CAP_S = 60.0  # never wait longer than this on one Retry-After

Post = Callable[[str, dict[str, Any], float], Awaitable[Any]]
Report = Callable[[str, str], Awaitable[None]]


def split_reply(reply: Reply) -> list[Reply]:
    """The reply as the messages `send` delivers one at a time (the outbox retries each alone)."""
    if reply.document is not None or not reply.text.strip():
        return [reply]
    return [dataclasses.replace(reply, text=piece) for piece in split_message(reply.text, TEXT_LIMIT)] or [reply]


def text_parts(reply: Reply) -> list[str]:
    """The reply's plain text in parts of at most 4000 characters (a file becomes a note: no CDN upload here)."""
    text = markdown_to_plain(reply.text)
    if reply.document is not None:
        # iLink files need an encrypted CDN upload we do not do: say so instead of dropping it.
        note = f"[The file {reply.document.filename} cannot be sent over WeChat.]"
        log.warning("wechat: a document reply was sent as a note (files are not supported)")
        text = f"{text}\n\n{note}" if text.strip() else note
    return split_message(text, TEXT_LIMIT) if text.strip() else []


class Sender:
    """sendmessage with retries; `post` is the adapter's bot call, `report` tells the owner (keyed, throttled)."""

    def __init__(self, post: Post, *, context_token: Callable[[str], str | None], running: Callable[[], bool],
                 report: Report, stats: dict[str, int], client_version: str, request_timeout: float,
                 backoff_base: float, backoff_cap: float, sleep: Callable[[float], Awaitable[object]]) -> None:
        self._post = post
        self._context_token = context_token
        self._running = running              # False while the adapter has no connection or login
        self._report = report
        self.stats = stats                   # the adapter's counters: "sent", "send_failed"
        self._client_version = client_version
        self._request_timeout = request_timeout
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._sleep = sleep

    async def send_text(self, user: str, text: str) -> None:
        """One part to one user; ChannelError if it was not delivered."""
        if not self._running():
            raise ChannelError("the WeChat adapter is not running")
        token = self._context_token(user)
        if not token:
            log.warning("wechat: no context_token for this user yet; sending without one")
        body = proto.sendmessage_body(user, text, token, proto.new_client_id(), self._client_version)
        payload: Any = None
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                payload = await self._post(proto.SEND_MESSAGE, body, self._request_timeout)
                break
            except TransportError as exc:
                if attempt == SEND_ATTEMPTS:
                    self._failed("sendmessage failed after %d attempts (%s)", attempt, exc)
                    raise ChannelError(f"WeChat send failed: {exc}") from exc
                # Same client_id on retry: the server de-duplicates, so a lost answer cannot double-send.
                backoff = proto.backoff_delay(attempt, self._backoff_base, self._backoff_cap)
                await self._sleep(retry_delay(exc.retry_after, backoff, max(RETRY_AFTER_CAP_S, backoff)))
        status = proto.parse_status(payload)
        if status.ok:
            self.stats["sent"] += 1
            return
        if proto.NOT_DELIVERED in (status.ret, status.errcode):
            self._failed("message not delivered (ret -2): the user has not written within the reply window")
            await self._report("not_delivered", (
                f"WeChat did not deliver a reply to {user} (ret -2): they have not written to the bot within "
                "the 24-hour reply window, so WeChat refuses messages to them until they write again."))
            raise ChannelError("WeChat did not deliver the message (ret -2: outside the reply window)", permanent=True)
        if status.session_expired:
            self._failed("message not delivered: the session expired (-14)")
            raise ChannelError(f"WeChat session expired; {LOGIN_HINT}")
        self._failed("sendmessage refused: ret=%s errcode=%s", status.ret, status.errcode)
        await self._report(f"refused:{status.ret}:{status.errcode}", (
            f"WeChat refused a reply to {user} (ret={status.ret} errcode={status.errcode}); it was not delivered."))
        raise ChannelError(f"WeChat refused the message (ret={status.ret} errcode={status.errcode})", permanent=True)

    def _failed(self, fmt: str, *args: object) -> None:
        self.stats["send_failed"] += 1
        log.error("wechat: " + fmt, *args)
