"""WeChat Official Account (公众号) channel: an aiohttp callback server in, passive XML or customer-service API out.

WeChat posts each user message to our URL and waits 5 s for an answer; without one it retries
(3 times in all). So a callback hands the message to the gateway and then waits up to
`passive_timeout` for the gateway's reply to this user: if `send()` comes in time, its first
part goes back in the HTTP response (the "passive reply"), everything else goes through the
customer-service API. If not, the callback answers "success" and the reply later goes through
the API, as does a passive reply WeChat can no longer take (it gave up on the connection).
Retries of a push (same MsgId, or sender + CreateTime for events) never make a second Message;
a retry gets the passive reply if one is ready.

This module is the channel: its lifecycle, and `send` (the first part passively when a callback
of that user still waits, the rest through the API). The callback requests are server.py's,
which requests count is auth.py's (with an EncodingAESKey only safe-mode pushes; each signed
(timestamp, nonce) once within `replay_window` seconds), and callbacks.py keeps the pushes a
reply can still ride on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import web

from adapters.download import fetch_url
from adapters.trouble import TroubleHook, TroubleNotices
from adapters.wechat.mp.auth import CallbackAuth
from adapters.wechat.mp.callbacks import Callback, PendingCallbacks
from adapters.wechat.mp.client import API_TIMEOUT_S, ApiRefused, CustomerServiceClient
from adapters.wechat.mp.crypto import WechatCryptoError, aes_key_from_encoding
from adapters.wechat.mp.messages import MEDIA_ID_REF, TEXT_LIMIT_BYTES, markdown_parts, message_from_push, split_for_wechat
from adapters.wechat.mp.replay import ReplayGuard
from adapters.wechat.mp.server import CallbackServer
from adapters.wechat.mp.xml_codec import MAX_XML_BYTES
from bot.channel import InboundHandler
from bot.errors import ChannelError, ConfigError, MediaError
from bot.message import Media, Message, Reply

__all__ = ["TEXT_LIMIT_BYTES", "WechatMpAdapter", "WechatMpStats", "message_from_push", "split_for_wechat"]

logger = logging.getLogger(__name__)

# A push's timestamp may be this far from our clock. WeChat signs a push as it sends it and
# retries within ~15 s, so 60 s leaves 45 s for clock skew (an NTP-synced host is off by far
# less); the protocol's customary 300 s only widens what a restart (which forgets the nonces
# seen) would let through again.
REPLAY_WINDOW_S = 60.0
MAX_REPLAY_WINDOW_S = 300.0
WECHAT_WAIT_S = 5.0  # WeChat drops the connection after this: a passive reply must come sooner


class Clock(Protocol):
    """Wall time for timestamps, monotonic time for TTLs (tests/fakes/clock.FakeClock fits)."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class _SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass
class WechatMpStats:
    """Counters of what the channel did; read by tests and /metrics."""

    received: int = 0  # pushes turned into a Message
    duplicates: int = 0  # WeChat retries recognised and not processed again
    ignored: int = 0  # events with nothing to answer (unsubscribe, menu views, ...)
    bad_signature: int = 0
    stale_timestamp: int = 0
    replayed: int = 0  # a signed (timestamp, nonce) seen before: refused
    plaintext_refused: int = 0  # a plaintext push to an account configured for safe mode
    abandoned: int = 0  # WeChat gave up on a callback before its reply was ready
    rerouted: int = 0  # passive replies WeChat could no longer take, sent through the API instead
    malformed: int = 0
    inbound_errors: int = 0
    passive_replies: int = 0
    api_messages: int = 0
    api_failures: int = 0
    token_fetches: int = 0


class WechatMpAdapter:
    """The Official Account callback channel (implements bot.channel.Channel)."""

    # WeChat takes a customer-service message only within 48 hours of the person's last one
    # (error 45015 after): a reminder set for later is told it may not arrive (bot.channel.LimitsReplies).
    reply_window_hours: float = 48.0

    def __init__(
        self,
        *,
        token: str,
        app_id: str,
        app_secret: str,
        encoding_aes_key: str | None,
        host: str = "127.0.0.1",
        port: int = 8080,
        path: str = "/wechat",
        api_base: str = "https://api.weixin.qq.com",
        name: str = "wechat_mp",
        passive_timeout: float = 4.5,
        replay_window: float = REPLAY_WINDOW_S,
        clock: Clock | None = None,
        on_trouble: TroubleHook | None = None,
    ) -> None:
        if not token:
            raise ConfigError("wechat_mp.token must not be empty")
        if not 0 < passive_timeout < WECHAT_WAIT_S:
            raise ConfigError(f"wechat_mp.passive_timeout must be in (0, {WECHAT_WAIT_S}) seconds")
        if not 0 < replay_window <= MAX_REPLAY_WINDOW_S:
            raise ConfigError(f"wechat_mp.replay_window must be in (0, {MAX_REPLAY_WINDOW_S:g}] seconds")
        try:
            aes_key = aes_key_from_encoding(encoding_aes_key) if encoding_aes_key else None
        except WechatCryptoError as exc:
            raise ConfigError(f"wechat_mp.encoding_aes_key is invalid: {exc}") from None
        self.name = name
        self._app_id = app_id
        self._app_secret = app_secret
        self._host = host
        self._port = port
        self._path = path if path.startswith("/") else "/" + path
        self._api_base = api_base
        self._passive_timeout = passive_timeout
        self._clock: Clock = clock or _SystemClock()
        self.stats = WechatMpStats()
        self._auth = CallbackAuth(token=token, app_id=app_id, aes_key=aes_key, replays=ReplayGuard(replay_window),
                                  stats=self.stats)
        # Told when WeChat refuses what we send (errcode != 0); bot.app wires it to the owner.
        self.on_trouble = on_trouble
        self._notices = TroubleNotices(name, monotonic=self._clock.monotonic)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._api: CustomerServiceClient | None = None
        self._callbacks = PendingCallbacks(self._clock.monotonic)
        self._server = CallbackServer(name=name, auth=self._auth, callbacks=self._callbacks, stats=self.stats,
                                      time=self._clock.time, monotonic=self._clock.monotonic,
                                      passive_timeout=passive_timeout, reroute=self._reroute)
        self._sending = 0
        self._sends_idle = asyncio.Event()
        self._sends_idle.set()

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the real one when configured with port 0)."""
        return self._port

    @property
    def url(self) -> str:
        """The callback URL this server answers on."""
        return f"http://{self._host}:{self._port}{self._path}"

    def is_up(self) -> bool:
        """Receiving: the callback server listens."""
        return self._runner is not None

    async def start(self, inbound: InboundHandler) -> None:
        """Start the callback server and the API session; returns once listening."""
        if self._runner is not None or self._session is not None:
            raise ChannelError("wechat_mp: already started")
        self._server.inbound = inbound
        app = web.Application(client_max_size=MAX_XML_BYTES)
        app.router.add_get(self._path, self._server.handle_verify)
        app.router.add_post(self._path, self._server.handle_push)
        # No access log: every callback query names the user (openid); our own log says what matters.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=self._passive_timeout + 1)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ChannelError(f"wechat_mp: cannot listen on {self._host}:{self._port} ({exc})") from exc
        self._runner = runner
        self._port = runner.addresses[0][1]
        self._session = aiohttp.ClientSession()
        self._api = CustomerServiceClient(
            self._session,
            api_base=self._api_base,
            app_id=self._app_id,
            app_secret=self._app_secret,
            clock=self._clock,
            stats=self.stats,
        )
        logger.info("wechat_mp: listening on %s (safe mode %s)", self.url, "on" if self._auth.safe_mode else "off")

    async def stop_receiving(self) -> None:
        """Stop the callback server but keep sending; a gateway that shuts down calls this first.

        Callbacks in flight still get their passive reply (the gateway is still answering). A
        push that arrived later would be answered "success" and then dropped by a closing
        gateway: refused instead, WeChat retries it, if need be against the next run.
        """
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def stop(self) -> None:
        """Stop the server (in-flight callbacks finish), wait for sends in progress, close the session."""
        await self.stop_receiving()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._sends_idle.wait(), timeout=API_TIMEOUT_S)
        session, self._session, self._api = self._session, None, None
        if session is not None:
            await session.close()
        self._callbacks.clear()

    def typing(self, message: Message) -> AbstractAsyncContextManager[None]:
        """No typing indicator: a callback is answered within seconds or not at all."""
        return contextlib.nullcontext()

    # -- outbound ----------------------------------------------------------------------------------

    def split(self, reply: Reply) -> list[Reply]:
        """The reply as the messages `send` delivers one at a time, so the outbox retries a part
        that failed alone and never resends one that went out (the first may go passively).

        Cut on the markdown at the byte limit; `send` flattens each part (which can, rarely,
        lengthen one past the limit: it then goes as two messages). A file note rides on the last.
        """
        pieces = markdown_parts(reply.text)
        if len(pieces) <= 1:
            return [reply]
        last = len(pieces) - 1
        return [dataclasses.replace(reply, text=piece, reply_to=reply.reply_to if i == 0 else None,
                                    document=reply.document if i == last else None)
                for i, piece in enumerate(pieces)]

    async def fetch_media(self, media: Media, *, max_bytes: int, timeout: float) -> bytes:
        """A follower's image by the PicUrl WeChat pushed with it, or an image or voice message by
        its MediaId through media/get (bot.channel.FetchesMedia)."""
        if self._session is None or self._api is None or not media.ref:
            raise MediaError("wechat_mp: nothing to fetch")
        if not media.ref.startswith(MEDIA_ID_REF):
            return await fetch_url(self._session, media.ref, max_bytes=max_bytes, timeout=timeout, what="WeChat's image host")
        try:
            return await self._api.media_get(media.ref.removeprefix(MEDIA_ID_REF), max_bytes=max_bytes, timeout=timeout)
        except ChannelError as exc:  # the access token could not be had: a later try may succeed
            raise MediaError(str(exc)) from None

    async def send(self, reply: Reply) -> None:
        """Answer passively if a callback for this user still waits, the rest via the customer-service API."""
        api = self._api
        if api is None:
            raise ChannelError("wechat_mp: send() before start()")
        openid = reply.recipient_id or reply.chat_id
        text = reply.text
        if reply.document is not None:
            # Files need a media upload this channel does not do; say so rather than drop it.
            logger.warning("wechat_mp: document %s not sent (unsupported)", reply.document.filename)
            text = (text + "\n\n" if text else "") + f"[file {reply.document.filename} cannot be sent here]"
        parts = split_for_wechat(text)
        if not parts:
            return
        self._sending += 1
        self._sends_idle.clear()
        try:
            callback = self._callbacks.claim(openid, reply.reply_to)
            if callback is not None:
                callback.first_part.set_result(parts[0])
                self.stats.passive_replies += 1
                parts = parts[1:]
                # What follows (the rest of this reply, or the outbox's next part, sent when this
                # returns) must not overtake the passive part: wait until it is written. Not when
                # called from inside inbound(): the response waits for inbound() to return.
                if not callback.handing_over:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(callback.responded.wait(), WECHAT_WAIT_S)
            for index, part in enumerate(parts):
                try:
                    await api.send_text(openid, part)
                except ChannelError as exc:
                    self.stats.api_failures += 1
                    logger.warning("wechat_mp: part %d/%d to %s not delivered: %s", index + 1, len(parts), openid, exc)
                    await self._report_refusal(exc, openid)
                    raise
        finally:
            self._sending -= 1
            if self._sending == 0:
                self._sends_idle.set()

    async def _reroute(self, callback: Callback) -> None:
        """Send the first part through the customer-service API: the passive reply could not be written."""
        api = self._api
        if api is None:
            logger.error("wechat_mp: reply to %s lost: the channel is stopping", callback.key)
            return
        self.stats.rerouted += 1
        try:
            await api.send_text(callback.openid, callback.first_part.result())
        except ChannelError as exc:
            self.stats.api_failures += 1
            logger.warning("wechat_mp: reply to %s not delivered through the API either: %s", callback.openid, exc)
            await self._report_refusal(exc, callback.openid)

    async def _report_refusal(self, exc: ChannelError, openid: str) -> None:
        """Tell the owner when WeChat refuses what we send (not for a network hiccup)."""
        if isinstance(exc, ApiRefused):
            await self._notices.report(self.on_trouble, f"errcode:{exc.errcode}", (
                f"The WeChat Official Account API refused a message to {openid}: {exc.explanation}. "
                "The reply was not delivered."))
