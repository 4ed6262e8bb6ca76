"""WeChat through wechaty: the python wechaty SDK (0.10.7) talking gRPC to a puppet service.

Optional channel. The SDK is unmaintained since 2022 and imports on Python 3.11 only with
`pyee==11.1.1`, `urllib3<2` and a patched `PuppetOptions.__hash__`, so it lives in the
`memgate[wechaty]` extra, installed in its own virtualenv (docs/wechaty.md). This module imports
without it; `WechatyAdapter.start()` raises ChannelError naming the extra when it is missing.

We use the SDK's user objects (`Message.load`, `ready`, `talker`, `room`, `mention_self`,
`is_self`) and its puppet's `message_send_text`, but not `Wechaty.start()`: that one swallows
errors, sleeps 60 s and retries forever on a network error, and stops the whole event loop on a
puppet error. Instead `start()` does its steps itself and fails with a ChannelError. Loading the
SDK (pins, patch, loggers) is wechaty_sdk.py's.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from adapters.plaintext import markdown_to_plain
from adapters.split import split_message
from adapters.wechat.wechaty_sdk import TOKEN_LOGGERS, RedactSecret, WechatySdk, load_wechaty_sdk
from bot.channel import InboundHandler
from bot.errors import ChannelError, ConfigError
from bot.message import Kind, Message, Reply

log = logging.getLogger(__name__)

TEXT_LIMIT = 2000  # characters per WeChat text message
CALL_TIMEOUT = 30.0  # seconds for one puppet RPC
CONNECT_TIMEOUT = 10.0  # seconds to reach the puppet service and have it start
_SEEN_IDS = 1024  # message ids remembered to drop the puppet's duplicate message events
# Timestamps above this (2038-01-01 in seconds) can only be milliseconds: the SDK's own rule.
_MILLIS_FROM = 2_145_888_000
_KINDS = {
    "MESSAGE_TYPE_TEXT": Kind.TEXT,
    "MESSAGE_TYPE_IMAGE": Kind.PHOTO,
    "MESSAGE_TYPE_AUDIO": Kind.VOICE,
    "MESSAGE_TYPE_EMOTICON": Kind.STICKER,
    "MESSAGE_TYPE_ATTACHMENT": Kind.FILE,
    "MESSAGE_TYPE_VIDEO": Kind.VIDEO,
}


# -- pure helpers ---------------------------------------------------------------------------


def parse_end_point(end_point: str) -> tuple[str, int]:
    """Split a puppet service end point "host:port" (an http:// prefix is allowed) into its parts.

    Raises:
        ValueError: no host, or no explicit port (we never guess one: the SDK would otherwise
            look the token up on the internet, which we never want).
    """
    parts = urlsplit(end_point if "://" in end_point else f"http://{end_point}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in wechaty end_point {end_point!r}") from exc
    if not parts.hostname or port is None or parts.scheme != "http":
        raise ValueError(f"wechaty end_point must be host:port, got {end_point!r}")
    return parts.hostname, port


def kind_for(type_name: str) -> Kind:
    """The neutral Kind of an SDK message type name (MESSAGE_TYPE_*); unknown names are OTHER."""
    return _KINDS.get(type_name, Kind.OTHER)


def message_time(timestamp: int | float, now: datetime) -> datetime:
    """The aware UTC time of a puppet timestamp: seconds, or milliseconds when above 2038 in
    seconds (2 145 888 000); `now` when the puppet sent none (0 or negative)."""
    if timestamp <= 0:
        return now
    seconds = timestamp / 1000 if timestamp > _MILLIS_FROM else timestamp
    return datetime.fromtimestamp(seconds, UTC)


def strip_mention(text: str, name: str) -> str:
    """Remove "@name" mentions of the bot from a room message (WeChat ends a mention with U+2005
    or a space) and trim the rest; text without such a mention is returned trimmed."""
    if not name:
        return text.strip()
    return re.sub(f"@{re.escape(name)}(?:\u2005| |$)", "", text).strip()


def reply_parts(text: str, limit: int = TEXT_LIMIT) -> list[str]:
    """The WeChat messages for one reply: Markdown split at `limit`, then made plain.

    Splitting works on the Markdown (so a cut never lands inside a code fence); the plain form of
    a part is rarely longer (a rule becomes ten box characters), and is split again if it is.
    Empty parts are dropped.
    """
    parts: list[str] = []
    for chunk in split_message(text, limit):
        plain = markdown_to_plain(chunk).strip()
        if plain:
            parts.extend([plain] if len(plain) <= limit else split_message(plain, limit))
    return parts


# -- the channel ----------------------------------------------------------------------------


class WechatyAdapter:
    """The wechaty channel: DMs and room mentions in, text replies out, via a puppet service."""

    def __init__(
        self,
        end_point: str,
        token: str,
        *,
        name: str = "wechaty",
        clock: Callable[[], datetime] | None = None,
        sdk_loader: Callable[[], WechatySdk] = load_wechaty_sdk,
    ) -> None:
        """Configure the channel; nothing connects (and the SDK is not imported) before start().

        Args:
            end_point: the puppet service's "host:port" (required: we never let the SDK look the
                token up on the internet).
            token: the puppet service token, sent as the gRPC :authority, never logged.
            name: the channel name, used as Message.channel.
            clock: aware-UTC "now", for messages the puppet sent without a timestamp.
            sdk_loader: imports the SDK; tests replace it to simulate a missing extra.

        Raises:
            ConfigError: end_point is not host:port.
        """
        try:
            self._host, self._port = parse_end_point(end_point)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.name = name
        self._end_point = end_point
        self._token = token
        self._clock = clock or (lambda: datetime.now(UTC))
        self._load_sdk = sdk_loader
        self._sdk: WechatySdk | None = None
        self._bot: Any = None
        self._scheduler: Any = None
        self._inbound: InboundHandler | None = None
        self._listener: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._sends = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._redact = RedactSecret(token)

    def is_up(self) -> bool:
        """Receiving: the puppet's event stream is open."""
        return self._listener is not None and not self._listener.done()

    async def start(self, inbound: InboundHandler) -> None:
        """Connect to the puppet service, have it start, and listen to its event stream."""
        if self._listener is not None:
            raise ChannelError(f"{self.name}: already started")
        sdk = self._sdk = self._load_sdk()
        for name in TOKEN_LOGGERS:
            logging.getLogger(name).addFilter(self._redact)
        self._scheduler = sdk.scheduler()
        options = sdk.options(
            puppet_options=sdk.puppet_options(end_point=f"{self._host}:{self._port}", token=self._token or None),
            # The SDK's plugin web server stays off (we never start plugins); keep it local anyway.
            host="127.0.0.1",
            port=0,
            scheduler=self._scheduler,
        )
        try:
            bot = self._bot = sdk.wechaty(options)
            await bot.init_puppet()  # builds the puppet and the user classes bound to it
            puppet = bot.puppet
            # Sync listeners: pyee would run coroutine listeners as untracked tasks.
            puppet.on("message", self._on_message_event)
            puppet.on("scan", self._on_scan)
            puppet.on("login", lambda payload: log.info("%s: logged in as %s", self.name, payload.contact_id))
            puppet.on("logout", lambda payload: log.warning("%s: logged out (%s)", self.name, payload.contact_id))
            puppet.on("error", lambda payload: log.warning("%s: puppet error: %s", self.name, payload))
            await self._connect(puppet)
        except ChannelError:
            await self._close_quietly()
            raise
        except Exception as exc:  # noqa: BLE001  (the unmaintained SDK raises many unrelated types)
            await self._close_quietly()
            raise ChannelError(f"{self.name}: puppet service at {self._end_point} failed to start: {exc!r}") from exc
        self._inbound = inbound
        self._listener = asyncio.create_task(self._listen(puppet), name=f"{self.name}-events")
        log.info("%s: connected to puppet service at %s", self.name, self._end_point)

    async def _connect(self, puppet: Any) -> None:
        """Reach the end point, open the gRPC channel and run the SDK's Stop-then-Start handshake."""
        # Our own async probe first: the SDK's check is a blocking telnet, and an unreachable
        # host should fail here with a clear error, not inside grpclib.
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, writer = await asyncio.open_connection(self._host, self._port)
            writer.close()
            await writer.wait_closed()
        except (OSError, TimeoutError) as exc:
            raise ChannelError(f"{self.name}: cannot reach puppet service at {self._end_point}: {exc!r}") from exc
        # _init_puppet is the SDK's channel set-up (token as :authority, no TLS); public start()
        # would also block in the event loop forever. Private, but the SDK is pinned ==0.10.7.
        puppet._init_puppet()  # noqa: SLF001
        async with asyncio.timeout(CONNECT_TIMEOUT):
            await puppet.puppet_stub.stop()  # the SDK resets the service before starting it
            await puppet.puppet_stub.start()

    async def _listen(self, puppet: Any) -> None:
        """Run the SDK's event loop over the gRPC stream; its end means no more messages."""
        try:
            await puppet._listen_for_event()  # noqa: SLF001  (the stream half of puppet.start())
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001  (any SDK failure ends the stream; say so loudly)
            log.exception("%s: puppet event stream failed; no more messages until restart", self.name)
        else:
            log.error("%s: puppet event stream closed by the service; no more messages until restart", self.name)

    def _on_scan(self, payload: Any) -> None:
        """The puppet wants a QR login: tell the operator (the QR content, never the token)."""
        log.warning("%s: scan to log in (status %s): %s", self.name, payload.status, payload.qrcode)

    def _on_message_event(self, payload: Any) -> None:
        """Puppet 'message' event: dedup its id and handle it in a tracked task."""
        message_id = payload.message_id
        if message_id in self._seen or self._inbound is None:
            return
        self._seen[message_id] = None
        if len(self._seen) > _SEEN_IDS:
            self._seen.popitem(last=False)
        task = asyncio.create_task(self._handle(message_id), name=f"{self.name}-message")
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, message_id: str) -> None:
        inbound = self._inbound
        try:
            message = await self._to_message(message_id)
        except Exception:  # noqa: BLE001  (one bad event must not stop the channel)
            log.exception("%s: could not load message %s", self.name, message_id)
            return
        if message is None or inbound is None:
            return
        try:
            await inbound(message)
        except Exception:  # noqa: BLE001  (the task has no awaiter: report here, not at GC)
            log.exception("%s: inbound handler failed for message %s", self.name, message_id)

    async def _to_message(self, message_id: str) -> Message | None:
        """Load a message through the SDK and turn it into a bot Message; None for our own."""
        bot = self._wechaty_bot()
        msg = bot.Message.load(message_id)
        async with asyncio.timeout(CALL_TIMEOUT):
            await msg.ready()  # payloads of the message, its talker and its room
            if bot.puppet.login_user_id and msg.is_self():
                return None
            talker, room = msg.talker(), msg.room()
            kind = kind_for(getattr(msg.type(), "name", ""))
            text = msg.text() if kind is Kind.TEXT else ""
            mentions_bot = False
            if room is not None:
                mentions_bot = await msg.mention_self()
                if mentions_bot:
                    me = bot.ContactSelf.load(bot.puppet.login_user_id)
                    await me.ready()
                    text = strip_mention(text, me.name)
        log.debug("%s: message %s from %s: %s", self.name, message_id, talker.contact_id, text)
        return Message(
            channel=self.name,
            chat_id=room.room_id if room is not None else talker.contact_id,
            sender_id=talker.contact_id,
            text=text,
            timestamp=message_time(msg.payload.timestamp, self._clock()),
            is_group=room is not None,
            mentions_bot=mentions_bot,
            message_id=message_id,
            sender_name=talker.name,
            kind=kind,
        )

    def _wechaty_bot(self) -> Any:
        if self._bot is None:
            raise ChannelError(f"{self.name}: not started")
        return self._bot

    async def send(self, reply: Reply) -> None:
        """Send a reply as plain-text messages of at most 2000 characters, to a contact or a room."""
        bot = self._wechaty_bot()
        errors = self._sdk.errors if self._sdk is not None else ()
        if reply.document is not None:
            log.warning("%s: documents are not supported; %s not sent", self.name, reply.document.filename)
        self._sends += 1
        self._idle.clear()
        try:
            for part in reply_parts(reply.text):
                # The puppet call Contact.say/Room.say make for text. We call it directly because
                # the SDK caches Contact/Room objects class-wide, bound to the puppet that first
                # loaded them: after a restart in the same process, say() would use a closed one.
                try:
                    async with asyncio.timeout(CALL_TIMEOUT):
                        await bot.puppet.message_send_text(conversation_id=reply.chat_id, message=part)
                except errors as exc:
                    raise ChannelError(f"{self.name}: send to {reply.chat_id} failed: {exc!r}") from exc
        finally:
            self._sends -= 1
            if self._sends == 0:
                self._idle.set()

    @asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        """No typing indicator in the puppet protocol: a no-op."""
        del message
        yield

    async def stop(self) -> None:
        """Stop listening, let in-flight messages and sends finish, and close the puppet."""
        self._inbound = None
        if self._listener is not None:
            self._listener.cancel()
            with suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        pending = set(self._handlers)
        if pending:
            _, late = await asyncio.wait(pending, timeout=CALL_TIMEOUT)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        with suppress(TimeoutError):
            async with asyncio.timeout(CALL_TIMEOUT):
                await self._idle.wait()
        await self._close_quietly()

    async def _close_quietly(self) -> None:
        """Tell the service to stop, close the gRPC channel and the scheduler; errors are logged."""
        bot, self._bot = self._bot, None
        if self._sdk is not None and bot is not None:
            puppet = bot.puppet
            try:
                async with asyncio.timeout(CALL_TIMEOUT):
                    await puppet.stop()  # Stop RPC, then closes the channel
            except self._sdk.errors as exc:
                log.warning("%s: puppet stop failed: %r", self.name, exc)
            finally:
                if puppet.channel is not None:
                    puppet.channel.close()
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        for name in TOKEN_LOGGERS:
            logging.getLogger(name).removeFilter(self._redact)
