"""A channel fake for gateway tests: tests push messages in as a given person and read what
the bot sent, like nonebot's fake adapter. It implements the real Channel protocol, and fetches
attachments (FetchesMedia) from `files`, by ref."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from bot.channel import InboundHandler
from bot.errors import MediaError
from bot.message import Kind, Media, Message, Reply


class RecordingChannel:
    def __init__(self, name: str = "console") -> None:
        self.name = name
        self.sent: list[Reply] = []
        self._inbound: InboundHandler | None = None
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self.typing_now = 0
        self.typing_max = 0
        self.files: dict[str, bytes] = {}  # what people attached, by Media.ref

    async def start(self, inbound: InboundHandler) -> None:
        self._inbound = inbound

    async def stop(self) -> None:
        self._inbound = None

    async def send(self, reply: Reply) -> None:
        async with self._changed:
            self.sent.append(reply)
            self._changed.notify_all()

    async def fetch_media(self, media: Media, *, max_bytes: int, timeout: float) -> bytes:
        if media.ref not in self.files:
            raise MediaError(f"no file {media.ref!r}")
        data = self.files[media.ref]
        if len(data) > max_bytes:
            raise MediaError(f"{len(data)} bytes", too_large=True)
        return data

    @asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        self.typing_now += 1
        self.typing_max = max(self.typing_max, self.typing_now)
        try:
            yield
        finally:
            self.typing_now -= 1

    async def say(self, user: str, text: str, *, chat: str | None = None, is_group: bool = False,
                  mentions_bot: bool = False, kind: Kind = Kind.TEXT, when: datetime | None = None,
                  name: str | None = None, media: tuple[Media, ...] = ()) -> Message:
        msg = Message(channel=self.name, chat_id=chat or user, sender_id=user, sender_name=name or user, text=text,
                      timestamp=when or datetime.now(UTC), is_group=is_group, mentions_bot=mentions_bot,
                      message_id=str(next(self._ids)), kind=kind, media=media)
        assert self._inbound is not None, "channel not started"
        await self._inbound(msg)
        return msg

    async def wait_for(self, n: int, timeout: float = 30.0) -> list[Reply]:
        async def enough() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.sent) >= n)

        await asyncio.wait_for(enough(), timeout)
        return self.sent[:n]

    def texts(self, chat: str | None = None) -> list[str]:
        return [r.text for r in self.sent if chat is None or r.chat_id == chat]
