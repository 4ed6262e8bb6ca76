"""Terminals attached to the running gateway (`memgate chat` while `memgate run` is up, issue 24):
the gateway's "console" channel, seen from the turn like any channel, whose conversations are
held by clients of the API (bot.api.routes_chat) instead of this process's own stdin.

A line an attached terminal sends is a console message (`console:NAME`: the same person, so the
same memory space, as `memgate chat --user NAME` without a gateway) in a conversation of its own
(chat `NAME@attached`). With a space key instead of the admin token, the line is the key's
(channel "api", chat `KEYID@attached`: the key's space, as bot.access.policy decides). Either way it
goes through the inbox, the queue, access, the agent and capture like
every message, and its reply through the outbox to `send` here, which hands it to the listening
clients as an event. When the gateway itself reads a terminal (`memgate run` in one), that
terminal's conversations are passed through to it unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.channel import Channel, HasLocalCommands, InboundHandler, ReportsHealth
from bot.errors import ChannelError
from bot.message import Message, Reply

log = logging.getLogger(__name__)

ATTACHED_SUFFIX = "@attached"
# One client that stops reading must not hold the gateway's memory: past this many undelivered
# events it is cut off (its terminal says the line to the gateway broke).
MAX_PENDING_EVENTS = 256
LEAVE_HELP = "/quit, /exit, quit, Ctrl-D, Ctrl-C on an empty line: leave the terminal chat"  # adapters/console.py says the same


def attached_chat(user: str) -> str:
    """The conversation of `user`'s attached terminals (apart from the gateway's own terminal's)."""
    return user + ATTACHED_SUFFIX


class Listener:
    """One attached client's stream of events (replies, typing), read by its HTTP response."""

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.events: asyncio.Queue[dict | None] = asyncio.Queue()
        self.cut = False

    def put(self, event: dict | None) -> None:
        if self.cut:
            return
        if self.events.qsize() >= MAX_PENDING_EVENTS:
            self.cut = True
            self.events.put_nowait(None)
            return
        self.events.put_nowait(event)


class AttachedTerminals:
    """The "console" channel of a gateway that serves the API: attached clients, plus the gateway's
    own terminal (`local`) when it has one."""

    name = "console"

    def __init__(self, local: Channel | None = None, *, name: str = "console") -> None:
        self.name = name  # "console": terminal users (admin token); "api": space keys (bot.access.policy)
        self.local = local
        self._listeners: dict[str, set[Listener]] = {}
        self._inbound: InboundHandler | None = None

    # --- the channel ------------------------------------------------------------------------
    async def start(self, inbound: InboundHandler) -> None:
        self._inbound = inbound
        if self.local is not None:
            await self.local.start(inbound)

    async def stop_receiving(self) -> None:
        stop = getattr(self.local, "stop_receiving", None)
        if stop is not None:
            await stop()

    async def stop(self) -> None:
        self.close_listeners()
        if self.local is not None:
            await self.local.stop()

    def close_listeners(self) -> None:
        """The attached clients hear that the gateway is going (their terminals say so and end), and
        their streams end: the API server stops first and would otherwise wait for them."""
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.put({"type": "closing"})
                listener.put(None)

    def reader_chat(self, recipient_id: str, chat_id: str) -> str | None:
        """Where the person reads now: their attached terminals, else the gateway's own terminal
        when it is theirs; None when nobody reads (bot.channel.KnowsReaders)."""
        if self._listeners.get(attached_chat(recipient_id)):
            return attached_chat(recipient_id)
        reader = getattr(self.local, "reader_chat", None)
        return reader(recipient_id, chat_id) if reader is not None else None

    def is_up(self) -> bool:
        return self.local.is_up() if isinstance(self.local, ReportsHealth) else True

    def local_commands(self) -> list[tuple[str, str]]:
        if isinstance(self.local, HasLocalCommands):
            return list(self.local.local_commands())
        return [("quit", LEAVE_HELP), ("exit", "")]

    async def send(self, reply: Reply) -> None:
        listeners = self._listeners.get(reply.chat_id)
        if listeners:
            event: dict = {"type": "reply", "text": reply.text, "reply_to": reply.reply_to}
            if reply.document is not None:
                event["document"] = {"filename": reply.document.filename,
                                     "data": base64.b64encode(reply.document.data).decode("ascii")}
            for listener in listeners:
                listener.put(event)
            return
        if reply.chat_id.endswith(ATTACHED_SUFFIX) or self.local is None:
            # Nobody attached any more: the turn is answered and captured all the same, and a reply
            # held for a terminal that may never come back would be retried for days.
            raise ChannelError(f"no terminal is attached to {reply.chat_id} any more", permanent=True)
        await self.local.send(reply)

    @asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        listeners = self._listeners.get(message.chat_id)
        if not listeners:
            if self.local is not None and not message.chat_id.endswith(ATTACHED_SUFFIX):
                async with self.local.typing(message):
                    yield
            else:
                yield
            return
        for listener in listeners:
            listener.put({"type": "typing", "on": True, "message_id": message.message_id})
        try:
            yield
        finally:
            for listener in self._listeners.get(message.chat_id, ()):
                listener.put({"type": "typing", "on": False, "message_id": message.message_id})

    # --- the API's side -----------------------------------------------------------------------
    @asynccontextmanager
    async def listen(self, chat_id: str) -> AsyncIterator[Listener]:
        """A client's events for `chat_id` while it stays connected."""
        listener = Listener(chat_id)
        self._listeners.setdefault(chat_id, set()).add(listener)
        try:
            yield listener
        finally:
            group = self._listeners.get(chat_id)
            if group is not None:
                group.discard(listener)
                if not group:
                    del self._listeners[chat_id]

    async def hand_in(self, msg: Message) -> None:
        """A line from an attached terminal, into the gateway's inbox (durable when this returns)."""
        if self._inbound is None:
            raise ChannelError("the gateway is not receiving yet")
        await self._inbound(msg)
