"""The gateway: inbound message -> access -> per-conversation FIFO queue -> command or agent
turn -> reply through the message's channel.

One turn in flight per conversation (its queue is bounded; overflow is told to the sender,
never dropped silently); many conversations in parallel. Each conversation's worker task
exists only while it has messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bot.channel import Channel
from bot.access import Access, Allowed, Refused
from bot.agent import Agent, TurnRequest, TurnResult
from bot.commands import CommandContext, Commands
from bot.errors import ChannelError
from bot.message import Kind, Message, Reply
from bot.sessions import Sessions
from bot.tools import ToolContext

log = logging.getLogger(__name__)

OVERFLOW_TEXT = ("I still have {n} of your messages to answer, so I could not take this one. "
                 "Please send it again once I have replied.")
UNSUPPORTED_TEXT = {
    Kind.VOICE: "Voice messages are not supported yet; please type your message.",
    Kind.STICKER: "I can't read stickers; please send me text.",
    Kind.PHOTO: "I can't see images yet; add a caption and I will answer it.",
    Kind.VIDEO: "I can't watch videos yet; please describe it in text.",
    Kind.FILE: "I can't open files yet; please paste the text.",
    Kind.EDITED: "I saw you edited a message; I answer new messages only, so please send the new text again.",
    Kind.OTHER: "I can only read text messages for now.",
}


@dataclass(frozen=True)
class GatewaySettings:
    queue_size: int = 20
    history_tokens: int = 2000
    public_space: str = "public"


@dataclass
class _Item:
    msg: Message
    allowed: Allowed


class Gateway:
    """Routes messages between channels, access control, commands and the agent."""

    def __init__(self, *, access: Access, sessions: Sessions, agent: Agent | None, commands: Commands,
                 clock: Callable[[], datetime], settings: GatewaySettings | None = None) -> None:
        self.access = access
        self.sessions = sessions
        self.agent = agent
        self.commands = commands
        self.clock = clock
        self.settings = settings or GatewaySettings()
        self.channels: dict[str, Channel] = {}
        self._queues: dict[str, asyncio.Queue[_Item]] = {}
        self._workers: dict[str, asyncio.Task] = {}
        self._closing = False
        self.on_turn: Callable[[TurnResult], None] | None = None  # metrics hook (bench, /stats)

    def add_channel(self, channel: Channel) -> None:
        self.channels[channel.name] = channel

    async def start(self) -> None:
        for ch in self.channels.values():
            await ch.start(self.inbound)

    async def stop(self, timeout: float = 60.0) -> None:
        """Stop receiving, answer what is already queued (bounded by `timeout`), stop channels."""
        # First stop taking messages in, so nothing is acknowledged to a platform and then dropped.
        for ch in self.channels.values():
            stop_receiving = getattr(ch, "stop_receiving", None)
            if stop_receiving is not None:
                try:
                    await stop_receiving()
                except Exception:
                    log.exception("channel %s did not stop receiving cleanly", ch.name)
        self._closing = True
        if self._workers:
            done, pending = await asyncio.wait(list(self._workers.values()), timeout=timeout)
            for t in pending:
                t.cancel()
        for ch in self.channels.values():
            try:
                await ch.stop()
            except Exception:
                log.exception("channel %s did not stop cleanly", ch.name)

    async def idle(self) -> None:
        """Wait until every conversation queue is empty (tests, benchmarks)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    # --- inbound ---------------------------------------------------------------------------
    async def inbound(self, msg: Message) -> None:
        """The adapters' callback: check access and queue the message. Returns quickly."""
        if self._closing:
            return
        decision = await self.access.check(msg)
        if isinstance(decision, Refused):
            if decision.reply:
                await self._send(msg, decision.reply)
            return
        key = msg.conversation_key
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = asyncio.Queue(maxsize=self.settings.queue_size)
        try:
            queue.put_nowait(_Item(msg, decision))
        except asyncio.QueueFull:
            log.warning("queue full for %s; told the sender", key)
            await self._send(msg, OVERFLOW_TEXT.format(n=queue.qsize()))
            return
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"conversation:{key}")

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while not queue.empty():
                item = queue.get_nowait()
                try:
                    await self._handle(item.msg, item.allowed)
                except Exception:
                    log.exception("turn failed in %s", key)
                    await self._send(item.msg, "Sorry, something went wrong on my side. Please try again.")
        finally:
            self._workers.pop(key, None)
            if queue.empty():
                self._queues.pop(key, None)

    # --- one message -----------------------------------------------------------------------
    async def _handle(self, msg: Message, allowed: Allowed) -> None:
        if msg.kind is not Kind.TEXT and not msg.text.strip():
            await self._send(msg, UNSUPPORTED_TEXT.get(msg.kind, UNSUPPORTED_TEXT[Kind.OTHER]))
            return
        if msg.kind is Kind.EDITED:
            await self._send(msg, UNSUPPORTED_TEXT[Kind.EDITED])
            return
        text = msg.text.strip()
        if not text:
            return
        ctx = ToolContext(space_ids=allowed.space_ids, write_space=allowed.write_space,
                          public_space=self.settings.public_space, may_write_public=allowed.may_write_public,
                          kept_spaces=allowed.kept_spaces)
        if text.startswith("/"):
            out = await self.commands.handle(CommandContext(msg=msg, allowed=allowed, tools=ctx, gateway=self))
            if out is not None:
                await self._deliver(msg, out)
                return
        if self.agent is None:
            await self._send(msg, "No language model is configured, so I can only run commands. Try /help.")
            return
        session = await self.sessions.current(msg.conversation_key, allowed.write_space)
        history = await self.sessions.history(session.session_id, self.settings.history_tokens)
        req = TurnRequest(text=msg.text_for_agent.strip(), turn_id=f"{msg.conversation_key}:{msg.message_id or id(msg)}:{msg.timestamp.timestamp()}",
                          session_id=session.session_id, history=tuple(history), ctx=ctx, channel=msg.channel,
                          speaker=msg.sender_name or None)
        channel = self.channels.get(msg.channel)
        if channel is not None:
            async with channel.typing(msg):
                result = await self.agent.run(req)
        else:
            result = await self.agent.run(req)
        if self.on_turn is not None:
            self.on_turn(result)
        await self._send(msg, result.reply)

    async def new_session(self, msg: Message, allowed: Allowed) -> None:
        await self.sessions.current(msg.conversation_key, allowed.write_space, force_new=True)

    # --- outbound --------------------------------------------------------------------------
    async def _deliver(self, msg: Message, out: str | Reply) -> None:
        if isinstance(out, Reply):
            await self._send_reply(msg.channel, out)
        else:
            await self._send(msg, out)

    async def _send(self, msg: Message, text: str) -> None:
        await self._send_reply(msg.channel, Reply(channel=msg.channel, chat_id=msg.chat_id, text=text,
                                                  thread_id=msg.thread_id, reply_to=msg.message_id,
                                                  recipient_id=msg.sender_id))

    async def _send_reply(self, channel_name: str, reply: Reply) -> None:
        channel = self.channels.get(channel_name)
        if channel is None:
            log.error("no channel %s to answer on", channel_name)
            return
        try:
            await channel.send(reply)
        except ChannelError as exc:
            # The turn is already captured; the person's words are safe even if delivery failed.
            log.error("delivery on %s failed: %s", channel_name, exc)

    async def tell(self, channel: str, chat_id: str, recipient_id: str, text: str) -> None:
        """Send `text` to another chat than the one being answered (a person let in, a link to confirm)."""
        await self._send_reply(channel, Reply(channel=channel, chat_id=chat_id, text=text, recipient_id=recipient_id))

    async def notify_owner(self, text: str) -> None:
        """Tell the owner something (e.g. WeChat needs a new login) on any channel that reaches them.

        Owners who wrote to the bot are tried first, then owners named in the config (a DM chat
        id equals the user id on Telegram and WeChat)."""
        known = [(i.channel, i.external_id) for i in await self.access.users() if i.role.value == "owner"]
        configured = [tuple(k.split(":", 1)) for k in self.access.config.owners if ":" in k]
        for channel, external_id in dict.fromkeys(known + configured):
            if channel not in self.channels:
                continue
            try:
                await self.channels[channel].send(Reply(channel=channel, chat_id=external_id, text=text,
                                                        recipient_id=external_id))
                return
            except ChannelError:
                continue
        log.error("could not reach the owner: %s", text)
