"""WeChat Official Account (公众号) channel: an aiohttp callback server in, passive XML or customer-service API out.

WeChat posts each user message to our URL and waits 5 s for an answer; without one it retries
(3 times in all). So a callback hands the message to the gateway and then waits up to
`passive_timeout` for the gateway's reply to this user: if `send()` comes in time, its first
part goes back in the HTTP response (the "passive reply"), everything else goes through the
customer-service API. If not, the callback answers "success" and the reply later goes through
the API, as does a passive reply WeChat can no longer take (it gave up on the connection).
Retries of a push (same MsgId, or sender + CreateTime for events) never make a second Message;
a retry gets the passive reply if one is ready.

Authentication: with an EncodingAESKey configured only safe-mode pushes count, verified by
`msg_signature` over the ciphertext (the plain `signature` covers no body, so a plaintext push
is refused); without one the account is in plaintext mode. Either way a signed (timestamp,
nonce) is accepted once, within `replay_window` seconds of our clock (replay.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections import deque
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from aiohttp import web

from bot.channel import InboundHandler
from adapters.trouble import TroubleHook, TroubleNotices
from adapters.wechat.mp.client import API_TIMEOUT_S, ApiRefused, CustomerServiceClient
from adapters.wechat.mp.crypto import (
    WechatCryptoError,
    aes_key_from_encoding,
    check_signature,
    decrypt,
    encrypt,
    sha1_signature,
)
from adapters.wechat.mp.xml_codec import (
    MAX_XML_BYTES,
    InboundXml,
    XmlError,
    build_encrypted_reply,
    build_text_reply,
    parse_envelope,
    parse_inbound,
)
from adapters.wechat.mp.messages import TEXT_LIMIT_BYTES, dedup_key, markdown_parts, message_from_push, split_for_wechat
from adapters.wechat.mp.replay import ReplayGuard
from bot.errors import ChannelError, ConfigError, StoreError
from bot.message import Message, Reply

__all__ = ["TEXT_LIMIT_BYTES", "WechatMpAdapter", "WechatMpStats", "message_from_push", "split_for_wechat"]

logger = logging.getLogger(__name__)

# A push's timestamp may be this far from our clock. WeChat signs a push as it sends it and
# retries within ~15 s, so 60 s leaves 45 s for clock skew (an NTP-synced host is off by far
# less); the protocol's customary 300 s only widens what a restart (which forgets the nonces
# seen) would let through again.
REPLAY_WINDOW_S = 60.0
MAX_REPLAY_WINDOW_S = 300.0
DEDUP_TTL_S = 60.0  # WeChat's retries come within ~15 s; keep the key well past that
WECHAT_WAIT_S = 5.0  # WeChat drops the connection after this: a passive reply must come sooner
_GONE_CHECK_S = 0.1  # while waiting for a reply, how often to look whether WeChat is still there
_SUCCESS = "success"  # tells WeChat "received, no passive reply" (it then does not retry)


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


@dataclass(eq=False)
class _Callback:
    """One push (and its retries) while a reply to it can still be matched."""

    key: str
    openid: str
    account: str  # the account's original id: FromUserName of a passive reply
    created: float  # monotonic
    first_part: asyncio.Future[str]
    listeners: int = 0  # callback handlers (first delivery or retries) waiting to answer passively
    answered: bool = False  # a reply was matched to it (passively or through the API)
    handing_over: bool = False  # inside inbound(): a send() from there must not wait for the response
    responders: int = 0  # callback handlers (first delivery and retries) that have not answered yet
    written: bool = False  # a passive reply reached WeChat
    rerouted: bool = False  # the first part went through the API: retries answer "success"
    responded: asyncio.Event = field(default_factory=asyncio.Event)  # the first part is on its way


class WechatMpAdapter:
    """The Official Account callback channel (implements bot.channel.Channel)."""

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
            self._aes_key = aes_key_from_encoding(encoding_aes_key) if encoding_aes_key else None
        except WechatCryptoError as exc:
            raise ConfigError(f"wechat_mp.encoding_aes_key is invalid: {exc}") from None
        self.name = name
        self._token = token
        self._app_id = app_id
        self._app_secret = app_secret
        self._host = host
        self._port = port
        self._path = path if path.startswith("/") else "/" + path
        self._api_base = api_base
        self._passive_timeout = passive_timeout
        self._clock: Clock = clock or _SystemClock()
        self.stats = WechatMpStats()
        self._replays = ReplayGuard(replay_window)
        # Told when WeChat refuses what we send (errcode != 0); bot.app wires it to the owner.
        self.on_trouble = on_trouble
        self._notices = TroubleNotices(name, monotonic=self._clock.monotonic)
        self._inbound: InboundHandler | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._api: CustomerServiceClient | None = None
        self._callbacks: dict[str, _Callback] = {}
        self._open: dict[str, deque[_Callback]] = {}  # openid -> callbacks not yet answered, oldest first
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
        self._inbound = inbound
        app = web.Application(client_max_size=MAX_XML_BYTES)
        app.router.add_get(self._path, self._handle_verify)
        app.router.add_post(self._path, self._handle_push)
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
        logger.info("wechat_mp: listening on %s (safe mode %s)", self.url, "on" if self._aes_key else "off")

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
        self._open.clear()

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
            callback = self._claim(openid, reply.reply_to)
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

    def _claim(self, openid: str, reply_to: str | None) -> _Callback | None:
        """The callback whose HTTP response can carry this reply, or None.

        Any callback of this user still waiting will do (a passive reply is only a transport to
        the same person, so order and content are unchanged); the one named by `reply_to` first.
        A named callback nobody waits on any more is marked answered, so its retries do not wait.
        """
        self._purge()
        queue = list(self._open.get(openid, ()))
        waiting = [cb for cb in queue if cb.listeners > 0 and not cb.first_part.done()]
        named = next((cb for cb in queue if reply_to is not None and cb.key == reply_to), None)
        chosen = named if named in waiting else (waiting[0] if waiting else None)
        for callback in (named, chosen):
            if callback is not None:
                self._close(callback)
        return chosen

    # -- inbound -------------------------------------------------------------------------------------

    async def _handle_verify(self, request: web.Request) -> web.Response:
        """GET URL verification: echo `echostr` when `signature` signs token, timestamp, nonce."""
        q = request.query
        if not check_signature(q.get("signature", ""), self._token, q.get("timestamp", ""), q.get("nonce", "")):
            self.stats.bad_signature += 1
            logger.warning("wechat_mp: URL verification with a bad signature from %s", request.remote)
            return web.Response(status=403, text="forbidden")
        logger.info("wechat_mp: URL verification answered")
        return web.Response(text=q.get("echostr", ""))

    async def _handle_push(self, request: web.Request) -> web.StreamResponse:
        """POST push: authenticate, decrypt, parse, deduplicate, hand over, answer."""
        started = asyncio.get_running_loop().time()
        q = request.query
        timestamp, nonce = q.get("timestamp", ""), q.get("nonce", "")
        safe = q.get("encrypt_type", "").lower() == "aes"
        if self._aes_key is not None and not safe:
            # The plain signature does not cover the body: with a key set, only ciphertext counts.
            self.stats.plaintext_refused += 1
            logger.warning("wechat_mp: plaintext push from %s refused (the account is in safe mode)", request.remote)
            return web.Response(status=403, text="forbidden")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._malformed(request, "body too large")
        if safe:
            if self._aes_key is None:
                return self._malformed(request, "safe-mode push but no encoding_aes_key configured")
            try:
                envelope = parse_envelope(body)
            except XmlError as exc:
                return self._malformed(request, str(exc))
            signed = check_signature(q.get("msg_signature", ""), self._token, timestamp, nonce, envelope.encrypt)
        else:
            signed = check_signature(q.get("signature", ""), self._token, timestamp, nonce)
        if not signed:
            self.stats.bad_signature += 1
            logger.warning("wechat_mp: push with a bad signature from %s rejected", request.remote)
            return web.Response(status=403, text="forbidden")
        verdict = self._replays.check(timestamp, nonce, self._clock.time())
        if verdict == "stale":
            self.stats.stale_timestamp += 1
            logger.warning("wechat_mp: push with a stale timestamp %r from %s rejected", timestamp, request.remote)
            return web.Response(status=403, text="forbidden")
        if verdict == "replayed":
            self.stats.replayed += 1
            logger.warning("wechat_mp: replayed push (timestamp %r seen with this nonce) from %s rejected",
                           timestamp, request.remote)
            return web.Response(status=403, text="forbidden")
        try:
            xml = decrypt(envelope.encrypt, self._app_id, self._aes_key) if safe else body  # type: ignore[arg-type]
            push = parse_inbound(xml)
        except (WechatCryptoError, XmlError) as exc:
            return self._malformed(request, str(exc))
        logger.debug("wechat_mp: push %s from %s: %r", push.msg_type, push.from_user, push.content)
        return await self._dispatch(request, push, safe=safe, started=started)

    def _malformed(self, request: web.Request, reason: str) -> web.Response:
        self.stats.malformed += 1
        logger.warning("wechat_mp: malformed push from %s rejected: %s", request.remote, reason)
        return web.Response(status=400, text="bad request")

    async def _dispatch(self, request: web.Request, push: InboundXml, *, safe: bool, started: float) -> web.StreamResponse:
        """Hand a new push to the gateway (once per key), then wait for a passive reply."""
        message = message_from_push(push, self.name)
        if message is None:
            self.stats.ignored += 1
            logger.debug("wechat_mp: event %s needs no answer", push.event)
            return web.Response(text=_SUCCESS)
        self._purge()
        key = dedup_key(push)
        callback = self._callbacks.get(key)
        if callback is not None:
            self.stats.duplicates += 1
            logger.info("wechat_mp: retry of push %s, not processed again", key)
            callback.responders += 1
            if not (callback.first_part.done() or callback.answered):
                callback.listeners += 1
                try:
                    await self._wait_for_reply(request, callback, started)
                finally:
                    callback.listeners -= 1
            return await self._respond(request, callback, safe=safe)

        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        callback = _Callback(key, push.from_user, push.to_user, self._clock.monotonic(), future)
        self._callbacks[key] = callback
        self._open.setdefault(push.from_user, deque()).append(callback)
        self.stats.received += 1
        # Listening starts before the handover: a gateway may reply before inbound() returns.
        callback.listeners += 1
        callback.responders += 1
        try:
            assert self._inbound is not None
            callback.handing_over = True
            try:
                await self._inbound(message)
            except StoreError as exc:
                # Not recorded: answer an error, not "success", so WeChat posts it again; the
                # retry is a new push then, not a repeat of this one.
                self.stats.inbound_errors += 1
                logger.error("wechat_mp: push %s could not be recorded (%s); WeChat will retry", key, exc)
                self._callbacks.pop(key, None)
                self._close(callback)
                callback.responders -= 1
                return web.Response(status=503, text="retry later")
            except Exception:
                self.stats.inbound_errors += 1
                logger.exception("wechat_mp: the gateway failed on push %s", key)
                # Nothing will answer it: close it so replies and retries do not wait on it.
                self._close(callback)
                callback.responders -= 1
                return web.Response(text=_SUCCESS)
            finally:
                callback.handing_over = False
            await self._wait_for_reply(request, callback, started)
        finally:
            callback.listeners -= 1
        return await self._respond(request, callback, safe=safe)

    async def _wait_for_reply(self, request: web.Request, callback: _Callback, started: float) -> None:
        """Wait until the first reply part is set, the passive deadline of this request passes, or WeChat leaves.

        A request WeChat gave up on stops listening at once: the reply then goes through the
        API instead of waiting for a response nobody reads.
        """
        loop = asyncio.get_running_loop()
        deadline = started + self._passive_timeout
        while not callback.first_part.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if _gone(request):
                self.stats.abandoned += 1
                logger.info("wechat_mp: WeChat gave up on push %s; its reply will go through the API", callback.key)
                return
            # shield: a timeout of one listener must not cancel the future other listeners share.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(callback.first_part), min(remaining, _GONE_CHECK_S))

    async def _respond(self, request: web.Request, callback: _Callback, *, safe: bool) -> web.StreamResponse:
        """Answer passively if the first part is ready (it may have landed just at the deadline), else success.

        A passive reply is written out here, before returning, so that send() can hold the
        remaining parts until it is on its way and they reach the user after it. One WeChat can
        no longer take goes through the API instead, by the last handler of this push to answer
        (a retry still connected may yet carry it passively; never both).
        """
        try:
            if not callback.first_part.done() or callback.rerouted:
                return web.Response(text=_SUCCESS)
            if not _gone(request):
                response = web.Response(text=self._passive_xml(callback, safe=safe), content_type="application/xml")
                try:
                    await response.prepare(request)
                    await response.write_eof()
                    callback.written = True
                    return response
                except ConnectionError:
                    pass
            logger.info("wechat_mp: WeChat left before the passive reply to %s was written", callback.key)
            if callback.responders == 1 and not callback.written:
                callback.rerouted = True
                await self._reroute(callback)
            return web.Response(text=_SUCCESS)  # nobody reads it
        finally:
            callback.responders -= 1
            if callback.written or callback.responders == 0:
                callback.responded.set()

    async def _reroute(self, callback: _Callback) -> None:
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

    def _passive_xml(self, callback: _Callback, *, safe: bool) -> str:
        """The passive text reply XML, encrypted and signed in safe mode."""
        now = str(int(self._clock.time()))
        xml = build_text_reply(
            to_user=callback.openid,
            from_user=callback.account,
            create_time=int(now),
            content=callback.first_part.result(),
        )
        if not safe or self._aes_key is None:
            return xml
        nonce = str(secrets.randbelow(10**10))
        encrypted = encrypt(xml, self._app_id, self._aes_key)
        signature = sha1_signature(self._token, now, nonce, encrypted)
        return build_encrypted_reply(encrypt=encrypted, msg_signature=signature, timestamp=now, nonce=nonce)

    def _purge(self) -> None:
        """Forget pushes older than DEDUP_TTL_S: WeChat has stopped retrying them long since."""
        cutoff = self._clock.monotonic() - DEDUP_TTL_S
        stale = [key for key, cb in self._callbacks.items() if cb.created < cutoff and cb.listeners == 0]
        for key in stale:
            self._close(self._callbacks.pop(key))

    def _close(self, callback: _Callback) -> None:
        """Take a callback off its user's list of unanswered ones."""
        callback.answered = True
        queue = self._open.get(callback.openid)
        if queue is not None and callback in queue:
            queue.remove(callback)
            if not queue:
                del self._open[callback.openid]


def _gone(request: web.Request) -> bool:
    """WeChat has closed this callback's connection: a response can no longer reach it."""
    transport = request.transport
    return transport is None or transport.is_closing()
