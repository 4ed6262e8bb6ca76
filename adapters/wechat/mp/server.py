"""The Official Account's callback requests: WeChat's URL check, and each push authenticated
(auth.py), deduplicated against its retries (callbacks.py), handed to the gateway, then answered
in the same HTTP response when the gateway's first reply part comes within `passive_timeout`
(the "passive reply"), else with "success".

WeChat waits 5 s for an answer and gives up on the connection after that: a request WeChat left
stops waiting at once, and a passive reply it can no longer take is handed back to the channel
(`reroute`) to go through the customer-service API, by the last handler of that push to answer
(a retry still connected may yet carry it passively; never both).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from adapters.wechat.mp.auth import CallbackAuth, PushRefused
from adapters.wechat.mp.callbacks import Callback, PendingCallbacks
from adapters.wechat.mp.messages import dedup_key, message_from_push
from adapters.wechat.mp.xml_codec import InboundXml, build_text_reply
from bot.channel import InboundHandler
from bot.errors import StoreError

__all__ = ["CallbackServer", "PushCounters"]

logger = logging.getLogger(__name__)

_GONE_CHECK_S = 0.1  # while waiting for a reply, how often to look whether WeChat is still there
_SUCCESS = "success"  # tells WeChat "received, no passive reply" (it then does not retry)


class PushCounters(Protocol):
    """The counters the handlers bump (adapter.WechatMpStats)."""

    received: int
    duplicates: int
    ignored: int
    abandoned: int
    inbound_errors: int


class CallbackServer:
    """The GET and POST handlers of the callback URL; `inbound` is the gateway's, set at start."""

    def __init__(self, *, name: str, auth: CallbackAuth, callbacks: PendingCallbacks, stats: PushCounters,
                 time: Callable[[], float], monotonic: Callable[[], float], passive_timeout: float,
                 reroute: Callable[[Callback], Awaitable[None]]) -> None:
        self.name = name
        self._auth = auth
        self._callbacks = callbacks
        self.stats = stats
        self._time = time
        self._monotonic = monotonic
        self._passive_timeout = passive_timeout
        self._reroute = reroute          # the first part through the API: the passive reply could not be written
        self.inbound: InboundHandler | None = None

    async def handle_verify(self, request: web.Request) -> web.Response:
        """GET URL verification: echo `echostr` when the request is WeChat's (auth.py)."""
        echo = self._auth.verify_url(request.query, request.remote)
        if echo is None:
            return web.Response(status=403, text="forbidden")
        return web.Response(text=echo)

    async def handle_push(self, request: web.Request) -> web.StreamResponse:
        """POST push: authenticate, decrypt and parse (auth.py), then deduplicate, hand over, answer."""
        started = asyncio.get_running_loop().time()

        async def read() -> bytes | None:
            try:
                return await request.read()
            except web.HTTPRequestEntityTooLarge:
                return None

        try:
            push, safe = await self._auth.open_push(request.query, read, request.remote, self._time())
        except PushRefused as refused:
            return web.Response(status=refused.status, text=refused.text)
        logger.debug("wechat_mp: push %s from %s: %r", push.msg_type, push.from_user, push.content)
        return await self._dispatch(request, push, safe=safe, started=started)

    async def _dispatch(self, request: web.Request, push: InboundXml, *, safe: bool, started: float) -> web.StreamResponse:
        """Hand a new push to the gateway (once per key), then wait for a passive reply."""
        message = message_from_push(push, self.name)
        if message is None:
            self.stats.ignored += 1
            logger.debug("wechat_mp: event %s needs no answer", push.event)
            return web.Response(text=_SUCCESS)
        self._callbacks.purge()
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
        callback = Callback(key, push.from_user, push.to_user, self._monotonic(), future)
        self._callbacks.add(callback)
        self.stats.received += 1
        # Listening starts before the handover: a gateway may reply before inbound() returns.
        callback.listeners += 1
        callback.responders += 1
        try:
            assert self.inbound is not None
            callback.handing_over = True
            try:
                await self.inbound(message)
            except StoreError as exc:
                # Not recorded: answer an error, not "success", so WeChat posts it again; the
                # retry is a new push then, not a repeat of this one.
                self.stats.inbound_errors += 1
                logger.error("wechat_mp: push %s could not be recorded (%s); WeChat will retry", key, exc)
                self._callbacks.forget(callback)
                callback.responders -= 1
                return web.Response(status=503, text="retry later")
            except Exception:
                self.stats.inbound_errors += 1
                logger.exception("wechat_mp: the gateway failed on push %s", key)
                # Nothing will answer it: close it so replies and retries do not wait on it.
                self._callbacks.close(callback)
                callback.responders -= 1
                return web.Response(text=_SUCCESS)
            finally:
                callback.handing_over = False
            await self._wait_for_reply(request, callback, started)
        finally:
            callback.listeners -= 1
        return await self._respond(request, callback, safe=safe)

    async def _wait_for_reply(self, request: web.Request, callback: Callback, started: float) -> None:
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

    async def _respond(self, request: web.Request, callback: Callback, *, safe: bool) -> web.StreamResponse:
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

    def _passive_xml(self, callback: Callback, *, safe: bool) -> str:
        """The passive text reply XML, encrypted and signed in safe mode."""
        now = str(int(self._time()))
        xml = build_text_reply(
            to_user=callback.openid,
            from_user=callback.account,
            create_time=int(now),
            content=callback.first_part.result(),
        )
        return self._auth.seal(xml, safe=safe, timestamp=now)

def _gone(request: web.Request) -> bool:
    """WeChat has closed this callback's connection: a response can no longer reach it."""
    transport = request.transport
    return transport is None or transport.is_closing()
