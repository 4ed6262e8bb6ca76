"""A `Reply` as Bot API calls: the outbound half of the Telegram channel, as inbound.py is the other.

Text is split on its markdown source at Telegram's 4096 UTF-16 units and each part goes out as
HTML, again as plain text when Telegram cannot parse it; a photo or a document carries a short
text as its caption. Network errors are retried a few times (429s are AIORateLimiter's); every
final failure is a ChannelError that says whether a retry can help (permanent, retry_after), for
the outbox to judge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from telegram import InputFile, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application

from adapters.split import split_message
from adapters.telegram.format import markdown_to_plain, markdown_to_telegram_html
from bot.errors import ChannelError
from bot.message import Reply

__all__ = ["TELEGRAM_CAPTION_LIMIT", "TELEGRAM_TEXT_LIMIT", "Sender", "api_chat_id", "split_reply", "utf16_len"]

log = logging.getLogger(__name__)

TELEGRAM_TEXT_LIMIT = 4096
TELEGRAM_CAPTION_LIMIT = 1024
_T = TypeVar("_T")


def utf16_len(s: str) -> int:
    """Length in UTF-16 code units: the unit of Telegram's message limits."""
    return len(s.encode("utf-16-le")) // 2


def split_reply(reply: Reply) -> list[Reply]:
    """The reply as the messages `Sender.send` delivers one at a time: markdown parts of at most 4096
    UTF-16 units (the first quotes the user's message), then the document, if any (a short
    text rides along as its caption). The outbox sends and retries them one by one."""
    text = reply.text or ""
    if reply.document is not None and (not text.strip() or utf16_len(text) <= TELEGRAM_CAPTION_LIMIT):
        return [reply]
    pieces = split_message(text, TELEGRAM_TEXT_LIMIT, measure=utf16_len) if text.strip() else []
    parts = [dataclasses.replace(reply, text=piece, document=None, reply_to=reply.reply_to if i == 0 else None)
             for i, piece in enumerate(pieces)]
    if reply.document is not None:
        parts.append(dataclasses.replace(reply, text="", reply_to=None if parts else reply.reply_to))
    return parts or [reply]


class Sender:
    """Sends replies through a started Application; `safe` blanks the token in error texts."""

    def __init__(self, name: str, safe: Callable[[BaseException], str], *, network_retries: int = 2,
                 retry_delay: float = 1.0) -> None:
        self.name = name
        self.safe = safe
        self.network_retries = network_retries
        self.retry_delay = retry_delay

    async def send(self, app: Application, reply: Reply) -> None:
        """Split the markdown at 4096, send each part as HTML (plain text if Telegram cannot parse
        it), then the document if any. Raises ChannelError on a final failure."""
        chat_id = api_chat_id(reply.chat_id)
        thread_id = int(reply.thread_id) if reply.thread_id else None
        reply_to = reply_parameters(reply.reply_to)
        if reply.image is not None:
            # Telegram shows pictures: the image and its caption stand in for the text.
            await self._send_image(app, reply, chat_id, thread_id, reply_to)
            return
        text = reply.text or ""
        caption = None
        if reply.document is not None and text.strip() and utf16_len(text) <= TELEGRAM_CAPTION_LIMIT:
            caption, text = text, ""
        if not text.strip() and reply.document is None:
            log.debug("%s: empty reply to %s not sent", self.name, reply.chat_id)
        for part in split_message(text, TELEGRAM_TEXT_LIMIT, measure=utf16_len):
            sent = await self._send_part(app, chat_id, part, thread_id, reply_to)
            if sent:
                reply_to = None  # only the first part quotes the user's message
        if reply.document is not None:
            await self._send_document(app, reply, chat_id, thread_id, reply_to, caption)

    async def _send_part(
        self, app: Application, chat_id: int | str, part: str, thread_id: int | None, reply_to: ReplyParameters | None
    ) -> bool:
        """One part as HTML; on "can't parse entities", the same part as plain text."""
        plain = markdown_to_plain(part)
        if not plain.strip():
            return False  # markup only (e.g. an empty code block): Telegram refuses empty text
        common = {"chat_id": chat_id, "message_thread_id": thread_id, "reply_parameters": reply_to}
        try:
            await self.call(app.bot.send_message, text=markdown_to_telegram_html(part), parse_mode=ParseMode.HTML, **common)
            return True
        except BadRequest as exc:
            if not is_parse_error(exc):
                # "chat not found", "message is too long"...: the same request fails the same way.
                raise ChannelError(f"{self.name}: sendMessage refused: {self.safe(exc)}", permanent=True) from exc
            log.warning("%s: HTML refused (%s); resending as plain text", self.name, self.safe(exc))
        # Plain text can outgrow its markdown by a little (">x" becomes "> x"): split again.
        for chunk in split_message(plain, TELEGRAM_TEXT_LIMIT, measure=utf16_len):
            try:
                await self.call(app.bot.send_message, text=chunk, **common)
            except BadRequest as exc:
                raise ChannelError(f"{self.name}: sendMessage refused: {self.safe(exc)}", permanent=True) from exc
            common["reply_parameters"] = None
        return True

    async def _send_image(
        self, app: Application, reply: Reply, chat_id: int | str, thread_id: int | None, reply_to: ReplyParameters | None
    ) -> None:
        """sendPhoto with the caption as HTML (plain on a parse error); a caption past 1024 goes first as text."""
        image = reply.image
        assert image is not None
        caption = image.caption
        if caption.strip() and utf16_len(caption) > TELEGRAM_CAPTION_LIMIT:
            for part in split_message(caption, TELEGRAM_TEXT_LIMIT, measure=utf16_len):
                if await self._send_part(app, chat_id, part, thread_id, reply_to):
                    reply_to = None
            caption = ""

        def upload() -> InputFile:
            file = InputFile(image.data, filename=image.filename)
            file.mimetype = image.mime
            return file

        common: dict[str, Any] = {"chat_id": chat_id, "message_thread_id": thread_id, "reply_parameters": reply_to}
        try:
            if caption.strip():
                try:
                    await self.call(app.bot.send_photo, fresh={"photo": upload},
                                     caption=markdown_to_telegram_html(caption), parse_mode=ParseMode.HTML, **common)
                    return
                except BadRequest as exc:
                    if not is_parse_error(exc):
                        raise
                await self.call(app.bot.send_photo, fresh={"photo": upload}, caption=markdown_to_plain(caption), **common)
            else:
                await self.call(app.bot.send_photo, fresh={"photo": upload}, **common)
        except BadRequest as exc:
            raise ChannelError(f"{self.name}: sendPhoto refused: {self.safe(exc)}") from exc

    async def _send_document(
        self,
        app: Application,
        reply: Reply,
        chat_id: int | str,
        thread_id: int | None,
        reply_to: ReplyParameters | None,
        caption: str | None,
    ) -> None:
        doc = reply.document
        assert doc is not None

        def upload() -> InputFile:
            # A fresh InputFile per attempt: a retry must upload the bytes from the start.
            file = InputFile(doc.data, filename=doc.filename)
            if doc.mime != "application/octet-stream":
                file.mimetype = doc.mime  # else PTB guesses from the file name
            return file

        common: dict[str, Any] = {"chat_id": chat_id, "message_thread_id": thread_id, "reply_parameters": reply_to}
        try:
            if caption:
                try:
                    await self.call(
                        app.bot.send_document,
                        fresh={"document": upload},
                        caption=markdown_to_telegram_html(caption),
                        parse_mode=ParseMode.HTML,
                        **common,
                    )
                    return
                except BadRequest as exc:
                    if not is_parse_error(exc):
                        raise
                await self.call(app.bot.send_document, fresh={"document": upload}, caption=markdown_to_plain(caption), **common)
            else:
                await self.call(app.bot.send_document, fresh={"document": upload}, **common)
        except BadRequest as exc:
            raise ChannelError(f"{self.name}: sendDocument refused: {self.safe(exc)}", permanent=True) from exc

    async def call(
        self,
        fn: Callable[..., Awaitable[_T]],
        *,
        fresh: dict[str, Callable[[], Any]] | None = None,
        **kwargs: Any,
    ) -> _T:
        """Call the Bot API; retry network errors a few times (429s are AIORateLimiter's).

        BadRequest propagates for the caller to judge; every other final failure is a
        ChannelError. `fresh` values are rebuilt for each attempt (uploads).
        """
        for attempt in range(self.network_retries + 1):
            args = dict(kwargs)
            for key, make in (fresh or {}).items():
                args[key] = make()
            try:
                return await fn(**args)
            except BadRequest:
                raise
            except RetryAfter as exc:
                # AIORateLimiter has waited out a few already; the outbox waits out the rest.
                raise ChannelError(f"{self.name}: still rate limited after retries ({self.safe(exc)})",
                                   retry_after=_seconds(exc.retry_after)) from exc
            except (Forbidden, InvalidToken) as exc:
                # Blocked by the user, kicked from the group, or a dead token: retrying cannot help.
                raise ChannelError(f"{self.name}: refused: {self.safe(exc)}", permanent=True) from exc
            except NetworkError as exc:
                # TimedOut is a NetworkError too: the message may have gone out, but a rare
                # duplicate beats a lost reply.
                if attempt == self.network_retries:
                    raise ChannelError(f"{self.name}: network error after {attempt + 1} tries: {self.safe(exc)}") from exc
                log.warning("%s: network error (%s), retry %d", self.name, self.safe(exc), attempt + 1)
                await asyncio.sleep(self.retry_delay * (2**attempt))
            except TelegramError as exc:
                raise ChannelError(f"{self.name}: Bot API error: {self.safe(exc)}") from exc
        raise AssertionError("unreachable")


def _seconds(value: object) -> float | None:
    """retry_after as seconds (PTB gives an int or a timedelta, depending on its settings)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def is_parse_error(exc: BadRequest) -> bool:
    return "can't parse entities" in str(exc).lower() or "can't find end tag" in str(exc).lower()


def api_chat_id(chat_id: str) -> int | str:
    """Numeric ids go out as ints: AIORateLimiter treats string ids as groups (20 msgs/min)."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def reply_parameters(message_id: str | None) -> ReplyParameters | None:
    if not message_id:
        return None
    try:
        return ReplyParameters(message_id=int(message_id), allow_sending_without_reply=True)
    except ValueError:
        return None
