"""Personal WeChat through the official iLink bot API (the protocol of Tencent's openclaw-weixin).

Receive: long poll `getupdates`; the opaque `get_updates_buf` cursor is saved only after every
message of the batch is in the gateway's inbox, so a restart neither repeats nor skips messages;
a batch the gateway could not record is fetched again with the old cursor. Send:
`sendmessage` echoing the user's latest `context_token` (saved too: replies survive a restart).
A -14 from getupdates means the login is gone: polling stops (no retry loop against a dead
session), the owner is told, and polling resumes by itself once `memgate wechat login` has
written new credentials. A reply WeChat will not deliver (ret -2: outside the 24 h window, or
another refusal) is told to the owner too, through the same `on_trouble` hook (throttled). A
429 / 503 is retried after what its Retry-After asks (capped).

This module holds the lifecycle, the receive loop and the login's state; sending is
outbound.py's, one bot call client.py's, the typing indicator typing_indicator.py's.

Why one module of ~430 lines: the receive loop, the session expiry and a new login share the
cursor, the context tokens, the seen message ids and the credentials' stamp (a new login loads
the first two afresh, an expiry stops the loop until one comes); what stands alone is already
apart (inbound, outbound, client, media, state, login, typing_indicator).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from adapters.retry_after import retry_delay
from adapters.trouble import TroubleHook, TroubleNotices
from adapters.wechat.ilink import protocol as proto
from adapters.wechat.ilink.client import TransportError, post
from adapters.wechat.ilink.inbound import UpdatesBatch, parse_updates, to_message
from adapters.wechat.ilink.media import CDN_BASE_URL, fetch_cdn
from adapters.wechat.ilink.outbound import LOGIN_HINT, RETRY_AFTER_CAP_S, SEND_ATTEMPTS, Sender, split_reply, text_parts
from adapters.wechat.ilink.state import (
    credentials_path,
    file_stamp,
    load_context_tokens,
    load_credentials,
    load_cursor,
    save_context_tokens,
    save_cursor,
)
from adapters.wechat.ilink.typing_indicator import TypingIndicator
from bot.channel import InboundHandler
from bot.errors import ChannelError, MediaError, StoreError
from bot.message import Media, Message, Reply

log = logging.getLogger(__name__)

# The server holds getupdates up to longpolling_timeout_ms; allow this much more before we call
# the poll dead (a client-side timeout is an empty batch, not an error).
POLL_MARGIN_S = 5.0
SEEN_IDS = 2048


class WechatIlinkAdapter:
    """The WeChat channel over iLink: DMs in, text replies out, typing while the agent works."""

    def __init__(
        self,
        data_dir: Path,
        *,
        base_url: str | None = None,
        app_id: str = proto.DEFAULT_APP_ID,
        client_version: str = proto.DEFAULT_CLIENT_VERSION,
        name: str = "wechat",
        on_trouble: TroubleHook | None = None,
        poll_timeout_ms: int = 35_000,
        request_timeout: float = 15.0,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        credentials_check_interval: float = 3.0,
        typing_interval: float = 6.0,
        cdn_base_url: str = CDN_BASE_URL,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.name = name
        # One reader of the bot's message cursor (its state lives in data_dir, shared by the processes).
        self.receive_lock = f"wechat-ilink:{name}"
        # Asked before each getupdates when processes share a database (bot.channel.OneReceiver).
        self.may_receive: Callable[[], Awaitable[bool]] | None = None
        self.data_dir = Path(data_dir)
        self.stats: dict[str, int] = {"received": 0, "sent": 0, "send_failed": 0, "poll_errors": 0, "expired": 0}
        self._base_override = base_url.rstrip("/") if base_url else None
        self._app_id = app_id
        self._client_version = client_version
        # Told when the login expires or WeChat refuses a reply; bot.app wires it to the owner.
        self.on_trouble = on_trouble
        self._notices = TroubleNotices(name)
        self._poll_timeout_ms = poll_timeout_ms
        self._request_timeout = request_timeout
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._check_interval = credentials_check_interval
        self._cdn_base = cdn_base_url.rstrip("/")
        self._now = now
        self._sleep = sleep  # the waits between retries (tests record what Retry-After asked)
        self._creds: proto.Credentials | None = None
        self._creds_stamp: tuple[int, int, int] | None = None
        self._cursor = ""
        self._context_tokens: dict[str, str] = {}
        self._seen: deque[str] = deque(maxlen=SEEN_IDS)
        self._seen_set: set[str] = set()
        self._http: aiohttp.ClientSession | None = None
        self._inbound: InboundHandler | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._handing_over: asyncio.Task[None] | None = None
        self._sends = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.session_expired = False
        self._typing = TypingIndicator(name, self._post, context_token=lambda user: self._context_tokens.get(user),
                                       running=lambda: self._http is not None, client_version=client_version,
                                       interval=typing_interval, request_timeout=request_timeout)
        self._sender = Sender(self._post, context_token=lambda user: self._context_tokens.get(user),
                              running=lambda: self._http is not None and self._creds is not None, report=self._report,
                              stats=self.stats, client_version=client_version, request_timeout=request_timeout,
                              backoff_base=backoff_base, backoff_cap=backoff_cap, sleep=sleep)

    # -- lifecycle ------------------------------------------------------------------------------

    def is_up(self) -> bool:
        """Receiving: the poll loop runs and the login is valid (a -14 ends both)."""
        return self._poll_task is not None and not self._poll_task.done() and not self.session_expired

    async def start(self, inbound: InboundHandler) -> None:
        """Load the stored login and start long polling; ChannelError if there is no login."""
        if self._poll_task is not None or self._http is not None:
            raise ChannelError("the WeChat adapter is already running")
        creds = load_credentials(self.data_dir)
        if creds is None:
            raise ChannelError(f"no WeChat login in {self.data_dir}: {LOGIN_HINT}")
        self._use_credentials(creds)
        self._inbound = inbound
        self._http = aiohttp.ClientSession()
        await self._notify(proto.NOTIFY_START)
        self._poll_task = asyncio.create_task(self._poll_loop(), name=f"{self.name}-ilink-poll")
        log.info("wechat: polling started for bot %s", creds.ilink_bot_id)

    async def stop_receiving(self) -> None:
        """Stop long polling but keep sending; a gateway that shuts down calls this before it answers what is queued.

        A message taken from WeChat after this point would be acknowledged (the cursor moves on)
        and then dropped by a gateway that is shutting down. A batch already being handed over
        is finished and its cursor saved first; a poll still waiting is dropped unacknowledged,
        so the server hands its messages out again after a restart.
        """
        task, self._poll_task = self._poll_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        handing_over, self._handing_over = self._handing_over, None
        if handing_over is not None:
            try:
                await handing_over
            except Exception:
                log.exception("wechat: handing the last batch to the gateway failed")

    async def stop(self) -> None:
        """Stop polling, let in-flight sends finish (up to a bound), then close the connection."""
        await self.stop_receiving()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), self._request_timeout * SEND_ATTEMPTS)
        if self._http is not None:
            if not self.session_expired:
                await self._notify(proto.NOTIFY_STOP)
            await self._http.close()
            self._http = None

    @property
    def poll_timeout_ms(self) -> int:
        """The long-poll timeout in use: ours at first, then the one the server advertises."""
        return self._poll_timeout_ms

    @property
    def base_url(self) -> str:
        """The bot API host: the configured one, else the one the login returned."""
        if self._base_override:
            return self._base_override
        if self._creds and self._creds.baseurl:
            return self._creds.baseurl.rstrip("/")
        return proto.DEFAULT_BASE_URL

    # -- receiving ------------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        failures = 0
        while True:
            if self.session_expired:
                await self._wait_for_new_login()
                failures = 0
                continue
            if self.may_receive is not None and not await self._still_receiver():
                await self._sleep(self._backoff_base)
                continue
            try:
                batch = await self._get_updates()
            except TransportError as exc:
                failures += 1
                await self._back_off(failures, str(exc), exc.retry_after)
                continue
            except Exception:  # a bug here must not end receiving for good
                log.exception("wechat: unexpected error while polling")
                failures += 1
                await self._back_off(failures, "unexpected error")
                continue
            if batch is None:
                continue  # the long poll ran out on our side: normal, ask again
            if batch.status.session_expired:
                await self._expire()
                continue
            if not batch.status.ok:
                failures += 1
                await self._back_off(failures, f"ret={batch.status.ret} errcode={batch.status.errcode}")
                continue
            failures = 0
            if batch.longpolling_timeout_ms:
                self._poll_timeout_ms = batch.longpolling_timeout_ms
            # Shielded: cancelling the loop (stop_receiving) never leaves a batch half handed over
            # with its cursor unsaved, which would repeat its first messages after a restart.
            self._handing_over = asyncio.create_task(self._dispatch(batch), name=f"{self.name}-ilink-dispatch")
            try:
                await asyncio.shield(self._handing_over)
            except StoreError as exc:
                self._handing_over = None
                failures += 1
                await self._back_off(failures, f"the gateway could not record a message ({exc})")
                continue
            # Left set when cancelled: stop_receiving then waits for the handover to finish.
            self._handing_over = None

    async def _still_receiver(self) -> bool:
        """Whether this process is (still) the one reader of this bot's cursor."""
        try:
            return await self.may_receive()  # type: ignore[misc]
        except Exception as exc:  # the database is away: read nothing until it says who reads
            log.warning("wechat: cannot tell whether this process still receives (%s); not polling", exc)
            return False

    async def _get_updates(self) -> UpdatesBatch | None:
        body = proto.getupdates_body(self._cursor, self._client_version)
        try:
            payload = await self._post(proto.GET_UPDATES, body, self._poll_timeout_ms / 1000 + POLL_MARGIN_S)
        except TransportError as exc:
            if isinstance(exc.__cause__, TimeoutError):
                return None
            raise
        return parse_updates(payload)

    async def _back_off(self, failures: int, reason: str, retry_after: float | None = None) -> None:
        self.stats["poll_errors"] += 1
        backoff = proto.backoff_delay(failures, self._backoff_base, self._backoff_cap)
        delay = retry_delay(retry_after, backoff, max(RETRY_AFTER_CAP_S, backoff))
        log.warning("wechat: getupdates failed (%s); retry %d in %.1f s", reason, failures, delay)
        await self._sleep(delay)

    async def _dispatch(self, batch: UpdatesBatch) -> None:
        """Hand a batch to the gateway, then save the context tokens and the cursor, in that order."""
        assert self._inbound is not None and self._creds is not None
        tokens_changed = False
        unrecorded: StoreError | None = None
        for wire in batch.messages:
            if wire.from_bot or wire.from_user_id == self._creds.ilink_bot_id:
                continue  # our own sends come back through getupdates
            if wire.in_group:
                log.debug("wechat: ignoring a group message (DM only)")
                continue
            if wire.context_token and self._context_tokens.get(wire.from_user_id) != wire.context_token:
                self._context_tokens[wire.from_user_id] = wire.context_token
                tokens_changed = True
            if wire.message_id and wire.message_id in self._seen_set:
                log.debug("wechat: message %s delivered twice; ignored", wire.message_id)
                continue
            self.stats["received"] += 1
            message = to_message(wire, self.name, self._now())
            try:
                await self._inbound(message)
            except StoreError as exc:
                # Not recorded: keep the cursor where it is, so the server hands the batch out
                # again (what was recorded of it is recognised then and not answered twice). The
                # rest of the batch is still handed over, so each of its senders hears of it.
                self.stats["received"] -= 1
                unrecorded = unrecorded or exc
                continue
            except Exception:
                log.exception("wechat: the inbound handler failed on message %s", wire.message_id)
            if wire.message_id:
                self._remember(wire.message_id)
        if unrecorded is not None:
            if tokens_changed:
                self._save_state_quietly(self._save_context_tokens)
            raise unrecorded
        try:
            if tokens_changed:
                self._save_context_tokens()
            if batch.cursor and batch.cursor != self._cursor:
                self._cursor = batch.cursor
                self._save_cursor()
        except OSError as exc:
            # Receiving goes on with the in-memory state; only a restart would repeat messages.
            log.error("wechat: could not save the receive state in %s: %s", self.data_dir, exc)

    def _save_state_quietly(self, save: Callable[[], None]) -> None:
        try:
            save()
        except OSError as exc:
            log.error("wechat: could not save the receive state in %s: %s", self.data_dir, exc)

    def _remember(self, message_id: str) -> bool:
        """False when this message id was seen lately (a re-delivery)."""
        if message_id in self._seen_set:
            return False
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(message_id)
        self._seen_set.add(message_id)
        return True

    # -- session expiry -------------------------------------------------------------------------

    async def _expire(self) -> None:
        self.session_expired = True
        self.stats["expired"] += 1
        self._creds_stamp = file_stamp(credentials_path(self.data_dir))
        text = (
            "WeChat logged the bot out (session expired, errcode -14). Polling has stopped; "
            f"to reconnect, {LOGIN_HINT}. The bot resumes by itself once the new login is saved."
        )
        log.error("wechat: %s", text)
        # Not throttled: this runs once per expiry (polling stops until a new login).
        await self._notices.report(self.on_trouble, "session_expired", text, throttle=False)

    async def _wait_for_new_login(self) -> None:
        """Sleep until the credentials file changes, then take the new login; no API calls."""
        path = credentials_path(self.data_dir)
        while True:
            await asyncio.sleep(self._check_interval)
            stamp = file_stamp(path)
            if stamp is None or stamp == self._creds_stamp:
                continue
            creds = load_credentials(self.data_dir)
            if creds is None:
                self._creds_stamp = stamp
                continue
            self._use_credentials(creds)
            self.session_expired = False
            log.info("wechat: new login found for bot %s; polling resumes", creds.ilink_bot_id)
            return

    def _use_credentials(self, creds: proto.Credentials) -> None:
        """Adopt a login; cursor and context tokens belong to one bot account, so load (or reset) them."""
        self._creds = creds
        self._creds_stamp = file_stamp(credentials_path(self.data_dir))
        self._typing.forget_tickets()
        self._cursor = load_cursor(self.data_dir, creds.ilink_bot_id)
        self._context_tokens = load_context_tokens(self.data_dir, creds.ilink_bot_id)

    def _save_cursor(self) -> None:
        assert self._creds is not None
        save_cursor(self.data_dir, self._creds.ilink_bot_id, self._cursor)

    def _save_context_tokens(self) -> None:
        assert self._creds is not None
        save_context_tokens(self.data_dir, self._creds.ilink_bot_id, self._context_tokens)

    # -- sending --------------------------------------------------------------------------------

    def split(self, reply: Reply) -> list[Reply]:
        """The reply as the messages `send` delivers one at a time (the outbox retries each alone)."""
        return split_reply(reply)

    async def fetch_media(self, media: Media, *, max_bytes: int, timeout: float) -> bytes:
        """An image or file of an inbound message, from WeChat's CDN (bot.channel.FetchesMedia)."""
        if self._http is None:
            raise MediaError(f"{self.name}: not started")
        return await fetch_cdn(self._http, media, cdn_base=self._cdn_base, max_bytes=max_bytes, timeout=timeout)

    async def send(self, reply: Reply) -> None:
        """Send a reply as plain text in parts of at most 4000 characters (outbound.py); ChannelError if not delivered."""
        user = reply.recipient_id or reply.chat_id
        parts = text_parts(reply)
        if not parts:
            return
        self._sends += 1
        self._idle.clear()
        try:
            for part in parts:
                await self._sender.send_text(user, part)
        finally:
            self._sends -= 1
            if self._sends == 0:
                self._idle.set()

    async def _report(self, key: str, text: str) -> None:
        """Tell the owner (throttled per key) through the hook bot.app wired."""
        await self._notices.report(self.on_trouble, key, text)

    # -- typing ---------------------------------------------------------------------------------

    def typing(self, message: Message) -> AbstractAsyncContextManager[None]:
        """Show "typing..." to the sender while the block runs; failures are logged, never raised."""
        return self._typing.shown_to(message.sender_id)

    # -- HTTP -----------------------------------------------------------------------------------

    async def _post(self, endpoint: str, body: dict[str, Any], timeout: float) -> Any:
        """POST one bot call with the current login (client.py); the decoded JSON answer, or TransportError."""
        if self._http is None or self._creds is None:
            raise TransportError("not running")
        return await post(self._http, self.base_url, self._creds.bot_token, app_id=self._app_id,
                          client_version=self._client_version, endpoint=endpoint, body=body, timeout=timeout)

    async def _notify(self, endpoint: str) -> None:
        """notifystart / notifystop, as the official client does; best effort."""
        try:
            payload = await self._post(endpoint, {"base_info": proto.base_info(self._client_version)}, 5.0)
        except TransportError as exc:
            log.debug("wechat: %s failed (%s)", endpoint, exc)
            return
        if not proto.parse_status(payload).ok:
            log.debug("wechat: %s refused", endpoint)

