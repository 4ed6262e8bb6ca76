"""A reply shown in Telegram while it is written (bot.channel.ShowsDrafts): one message grows
(sendMessage for its first words, then editMessageText), and a reply past 4096 UTF-16 units goes on
in a new message. The finished reply comes from the outbox as usual; a part that carries a draft
handle (Reply.extra[DRAFT]) is the last edit of that message, formatted as every reply (HTML, plain
text when Telegram cannot parse it), and draft messages it no longer needs are deleted.

Paced per chat: a draft's calls and a finished part's edit come at most once per `interval`
seconds in a private chat and once per `group_interval` in a group (Telegram lets a bot send about
one message a second to a chat and twenty a minute to a group; edits count). AIORateLimiter still
waits out any 429 the Bot API gives.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from telegram.constants import ParseMode
from telegram.error import BadRequest
from telegram.ext import Application

from adapters.split import split_message
from adapters.telegram.format import markdown_to_plain, markdown_to_telegram_html
from adapters.telegram.outbound import (
    TELEGRAM_TEXT_LIMIT,
    Sender,
    api_chat_id,
    is_parse_error,
    reply_parameters,
    utf16_len,
)
from bot.channel import DRAFT, DRAFT_DROP
from bot.errors import ChannelError
from bot.message import Reply

log = logging.getLogger(__name__)

# A draft message is opened once this much is written: a push notification of one word helps nobody.
FIRST_CHARS = 24
GROUP_INTERVAL = 3.0


class ChatPace:
    """When each chat may see its next draft call (time.monotonic)."""

    def __init__(self, interval: float, group_interval: float = GROUP_INTERVAL) -> None:
        self.interval = interval
        self.group_interval = max(interval, group_interval)
        self._next: dict[int | str, float] = {}

    def of(self, chat_id: int | str) -> float:
        """Seconds between two calls in this chat (a group's id is negative, or an @name)."""
        return self.interval if isinstance(chat_id, int) and chat_id > 0 else self.group_interval

    @asynccontextmanager
    async def turn(self, chat_id: int | str) -> AsyncIterator[None]:
        """One call in this chat: after the last one's interval, counted from when it was answered
        (answered means Telegram had it: two calls are then apart by the interval where Telegram
        counts, whatever the network did to the first)."""
        delay = self._next.get(chat_id, 0.0) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            yield
        finally:
            self._next[chat_id] = time.monotonic() + self.of(chat_id)
            if len(self._next) > 10_000:  # old chats' times mean nothing any more
                now = time.monotonic()
                self._next = {c: t for c, t in self._next.items() if t > now}


class TelegramDrafts:
    """The channel's drafts: opening them, and finishing them with the reply's parts."""

    def __init__(self, name: str, sender: Sender, interval: float) -> None:
        self.name = name
        self.sender = sender
        self.pace = ChatPace(interval or 1.0)
        self.streams = interval > 0   # 0: replies are sent whole (a part that replaces a draft is still honoured)

    def open(self, app: Application, reply: Reply, handles: Sequence[str]) -> TelegramDraft | None:
        if not self.streams or reply.image is not None or reply.document is not None:
            return None
        return TelegramDraft(self, app, reply, handles)

    async def call(self, app: Application, chat_id: int | str, fn, **kwargs) -> object:
        """One paced Bot API call for a draft (errors as Sender.call gives them)."""
        async with self.pace.turn(chat_id):
            return await self.sender.call(fn, chat_id=chat_id, **kwargs)

    async def edit(self, app: Application, chat_id: int | str, handle: str, text: str) -> bool:
        """The message `handle` shows the markdown `text` (HTML, plain if Telegram cannot parse it);
        False when that message cannot be edited (deleted by the person, too old)."""
        for body, mode in ((markdown_to_telegram_html(text), ParseMode.HTML), (markdown_to_plain(text), None)):
            if not body.strip():
                return True   # markup only: nothing Telegram would take; the message stays as it was
            try:
                await self.call(app, chat_id, app.bot.edit_message_text, message_id=int(handle), text=body,
                                parse_mode=mode)
                return True
            except BadRequest as exc:
                said = str(exc).lower()
                if "not modified" in said:
                    return True   # it shows this already (the same edit again, after a restart)
                if mode is not None and is_parse_error(exc):
                    log.warning("%s: HTML refused in an edit (%s); as plain text", self.name, self.sender.safe(exc))
                    continue
                if "not found" in said or "can't be edited" in said:
                    return False
                raise ChannelError(f"{self.name}: editMessageText refused: {self.sender.safe(exc)}", permanent=True) from exc
        return True

    async def delete(self, app: Application, chat_id: int | str, handles: Sequence[str]) -> None:
        for handle in handles:
            try:
                await self.sender.call(app.bot.delete_message, chat_id=chat_id, message_id=int(handle))
            except (BadRequest, ChannelError) as exc:
                log.info("%s: a draft message could not be deleted (%s)", self.name, exc)

    async def finish(self, app: Application, reply: Reply) -> None:
        """Deliver a part that replaces a draft message (DRAFT) and removes the ones left (DRAFT_DROP)."""
        chat_id = api_chat_id(reply.chat_id)
        handle = reply.extra.get(DRAFT)
        plain = dataclasses.replace(reply, extra={k: v for k, v in reply.extra.items() if k not in (DRAFT, DRAFT_DROP)})
        if handle and reply.image is None and reply.document is None and reply.text.strip() \
                and utf16_len(markdown_to_plain(reply.text)) <= TELEGRAM_TEXT_LIMIT:
            if not await self.edit(app, chat_id, handle, reply.text):
                await self.sender.send(app, plain)   # the draft is gone: the part comes as a new message
        else:
            if handle:
                await self.delete(app, chat_id, [handle])
            await self.sender.send(app, plain)
        await self.delete(app, chat_id, reply.extra.get(DRAFT_DROP, "").split())


class TelegramDraft:
    """One reply growing in Telegram (bot.channel.Draft)."""

    def __init__(self, drafts: TelegramDrafts, app: Application, reply: Reply, handles: Sequence[str]) -> None:
        self._drafts = drafts
        self._app = app
        self._chat = api_chat_id(reply.chat_id)
        self._thread = int(reply.thread_id) if reply.thread_id else None
        self._reply_to = reply.reply_to
        self.interval = drafts.pace.of(self._chat)
        self.handles: list[str] = list(handles)
        # A reply written within one interval of its first words goes whole: no message for a
        # moment's fragment (and no push notification of it).
        self._opens_at = time.monotonic() + self.interval
        self._shown: list[str | None] = [None] * len(self.handles)  # unknown after a restart: edited again

    async def show(self, text: str) -> bool:
        if not self.handles and (len(text) < FIRST_CHARS or time.monotonic() < self._opens_at):
            return False
        parts = split_message(text, TELEGRAM_TEXT_LIMIT, measure=utf16_len) if text.strip() else []
        for i, part in enumerate(parts):
            if i < len(self._shown) and self._shown[i] == part:
                continue
            if i < len(self.handles):
                if not await self._drafts.edit(self._app, self._chat, self.handles[i], part):
                    raise ChannelError(f"{self._drafts.name}: a draft message is gone; the reply comes whole")
            else:
                self.handles.append(await self._open(part, first=i == 0))
                self._shown.append(None)
            self._shown[i] = part
        return True

    async def _open(self, part: str, *, first: bool) -> str:
        """A new message of the draft (the first quotes the message it answers); its handle."""
        bot = self._app.bot
        common = {"message_thread_id": self._thread,
                  "reply_parameters": reply_parameters(self._reply_to) if first else None}
        try:
            sent = await self._drafts.call(self._app, self._chat, bot.send_message, text=markdown_to_telegram_html(part),
                                           parse_mode=ParseMode.HTML, **common)
        except BadRequest as exc:
            if not is_parse_error(exc):
                raise ChannelError(f"{self._drafts.name}: sendMessage refused: {self._drafts.sender.safe(exc)}",
                                   permanent=True) from exc
            plain = split_message(markdown_to_plain(part), TELEGRAM_TEXT_LIMIT, measure=utf16_len)[0]
            try:
                sent = await self._drafts.call(self._app, self._chat, bot.send_message, text=plain, **common)
            except BadRequest as exc2:
                raise ChannelError(f"{self._drafts.name}: sendMessage refused: {self._drafts.sender.safe(exc2)}",
                                   permanent=True) from exc2
        return str(sent.message_id)

    async def drop(self) -> None:
        await self._drafts.delete(self._app, self._chat, self.handles)
        self.handles = []
