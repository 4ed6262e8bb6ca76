"""Terminals attached to the running gateway (`memgate chat` while `memgate run` is up, issue 24):
the gateway's "console" channel, seen from the turn like any channel, whose conversations are
held by clients of the API (bot.api.routes_chat) instead of this process's own stdin.

A line an attached terminal sends is a console message (`console:NAME`: the same person, so the
same memory space, as `memgate chat --user NAME` without a gateway) in a conversation of its own
(chat `NAME@attached`). With a space key instead of the admin token, the line is the key's
(channel "api", chat `KEYID@attached`: the key's space, as bot.access.policy decides). Either way it
goes through the inbox, the queue, access, the agent and capture like
every message, and its reply through the outbox to `send` here, which hands it to the listening
clients as an event. While the reply is written, its text so far goes to them as `draft` events
(bot.channel.ShowsDrafts): {"type": "draft", "reply_to", "from", "text"} means "the reply so far
is what you have up to character `from`, then `text`"; `"dropped": true` takes it away (cancelled).
The `reply` event that follows is the finished reply, which replaces the draft. When the gateway
itself reads a terminal (`memgate run` in one), that terminal's conversations are passed through
to it unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from bot.channel import Channel, Draft, HasLocalCommands, InboundHandler, ReportsHealth, ShowsDrafts
from bot.errors import ChannelError
from bot.message import Message, Reply

log = logging.getLogger(__name__)

ATTACHED_SUFFIX = "@attached"
# One client that stops reading must not hold the gateway's memory: past this many undelivered
# events it is cut off (its terminal says the line to the gateway broke). A reply's draft events
# waiting in a row are merged into one, so a slow client never falls behind a draft.
MAX_PENDING_EVENTS = 256
DRAFT_INTERVAL = 0.05  # seconds between two draft events of one reply (what comes meanwhile goes together)
LEAVE_HELP = "/quit, /exit, quit, Ctrl-D, Ctrl-C on an empty line: leave the terminal chat"  # adapters/console.py says the same


def attached_chat(user: str) -> str:
    """The conversation of `user`'s attached terminals (apart from the gateway's own terminal's)."""
    return user + ATTACHED_SUFFIX


class Listener:
    """One attached client's stream of events (replies, drafts, typing), read by its HTTP response."""

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self._events: deque[dict | None] = deque()
        self._ready = asyncio.Event()
        self.cut = False

    def put(self, event: dict | None) -> None:
        if self.cut:
            return
        last = self._events[-1] if self._events else None
        if (event is not None and last is not None and event.get("type") == last.get("type") == "draft"
                and event.get("reply_to") == last.get("reply_to") and not last.get("dropped")):
            self._events[-1] = merge_drafts(last, event)
            return
        if len(self._events) >= MAX_PENDING_EVENTS:
            self.cut = True
            event = None
        self._events.append(event)
        self._ready.set()

    async def get(self) -> dict | None:
        """The next event (None: the stream ends)."""
        while not self._events:
            self._ready.clear()
            await self._ready.wait()
        return self._events.popleft()


def merge_drafts(first: dict, then: dict) -> dict:
    """One draft event that does what `first` and then `then` did."""
    if then.get("dropped") or then["from"] <= first["from"]:
        return then
    return {**first, "text": first["text"][: then["from"] - first["from"]] + then["text"]}


class AttachedDraft:
    """A reply's draft on the attached clients of its chat: what changed, as `draft` events."""

    interval = DRAFT_INTERVAL
    handles: Sequence[str] = ()

    def __init__(self, chats: AttachedTerminals, chat_id: str, reply_to: str | None) -> None:
        self._chats, self._chat_id, self._reply_to = chats, chat_id, reply_to
        self._sent = ""

    async def show(self, text: str) -> bool:
        same = 0
        for a, b in zip(self._sent, text):
            if a != b:
                break
            same += 1
        self._chats.tell(self._chat_id, {"type": "draft", "reply_to": self._reply_to, "from": same, "text": text[same:]})
        self._sent = text
        return True

    async def drop(self) -> None:
        self._chats.tell(self._chat_id, {"type": "draft", "reply_to": self._reply_to, "from": 0, "text": "",
                                         "dropped": True})


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

    def open_draft(self, reply: Reply, handles: Sequence[str] = ()) -> Draft | None:
        """The reply shown while it is written: to the clients attached to its chat, or through to
        this gateway's own terminal (bot.channel.ShowsDrafts)."""
        if self._listeners.get(reply.chat_id):
            return AttachedDraft(self, reply.chat_id, reply.reply_to)
        if isinstance(self.local, ShowsDrafts) and not reply.chat_id.endswith(ATTACHED_SUFFIX):
            return self.local.open_draft(reply, handles)
        return None

    def tell(self, chat_id: str, event: dict) -> None:
        for listener in self._listeners.get(chat_id, ()):
            listener.put(event)

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
