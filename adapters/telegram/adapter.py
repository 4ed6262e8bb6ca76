"""The Telegram channel: long polling with python-telegram-bot, replies split, formatted, rate limited.

Updates become `bot.message.Message` (every kind, media included: the gateway decides what to
answer; inbound.py); a `Reply` is split on its markdown source at Telegram's 4096 limit, each part
is sent as HTML and, when Telegram cannot parse it, again as plain text (outbound.py); a reply
being written grows in one message, edited as it comes, and the finished reply is its last edit
(draft.py, with `stream_seconds` > 0). This module
holds the lifecycle: getMe, polling that confirms only what the gateway recorded, the typing
hint, the command menu (what Telegram accepts of it: menu.py) and the token kept out of the logs
(token_filter.py). Our @username comes from getMe; a group command addressed to another bot
("/help@other_bot") is none of ours and never reaches the gateway. The command menu the
composition root hands over is registered at start (setMyCommands).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from telegram import Update
from telegram.constants import ChatAction
from telegram.error import InvalidToken, TelegramError
from telegram.ext import AIORateLimiter, Application, ApplicationBuilder

from adapters.telegram.draft import TelegramDraft, TelegramDrafts
from adapters.telegram.inbound import message_from_update
from adapters.telegram.media import FileSource, fetch_file, file_base_url
from adapters.telegram.menu import telegram_menu
from adapters.telegram.outbound import (
    TELEGRAM_CAPTION_LIMIT,
    TELEGRAM_TEXT_LIMIT,
    Sender,
    api_chat_id,
    split_reply,
    utf16_len,
)
from adapters.telegram.token_filter import RedactToken
from bot.channel import DRAFT, DRAFT_DROP, InboundHandler, MenuCommand
from bot.errors import ChannelError, StoreError
from bot.message import Media, Message, Reply

__all__ = ["TELEGRAM_CAPTION_LIMIT", "TELEGRAM_TEXT_LIMIT", "TelegramAdapter", "message_from_update", "utf16_len"]

log = logging.getLogger(__name__)

ALLOWED_UPDATES = (Update.MESSAGE, Update.EDITED_MESSAGE)


class TelegramAdapter:
    """A `Channel` over the Telegram Bot API (long polling, python-telegram-bot 22)."""

    def __init__(
        self,
        token: str,
        *,
        base_url: str | None = None,
        base_file_url: str | None = None,
        local_dir: str | Path | None = None,
        bot_username: str | None = None,
        poll_timeout: float = 10.0,
        name: str = "telegram",
        typing_interval: float = 4.0,
        network_retries: int = 2,
        retry_delay: float = 1.0,
        request_timeout: float = 20.0,
        proxy: str | None = None,
        stream_seconds: float = 0.0,
    ) -> None:
        """`stream_seconds` > 0: a reply being written is shown growing in one message, edited at most
        this often per chat (draft.py; `[channels.telegram] stream_seconds` sets it for `memgate run`);
        0: replies are sent whole."""
        if not token:
            raise ChannelError("telegram: a bot token is required")
        self.name = name
        self._token = token
        self._base_url = base_url
        # Downloads go only here (or, in local mode, to files inside local_dir): adapters/telegram/media.py.
        self._files = FileSource(file_base_url(base_url, base_file_url), Path(local_dir) if local_dir else None)
        self._http: httpx.AsyncClient | None = None  # the file downloads' client, opened on the first one
        self._bot_username = (bot_username or "").lstrip("@") or None
        self._bot_id: int | None = None
        self._poll_timeout = poll_timeout
        self._typing_interval = typing_interval
        self._retry_delay = retry_delay
        self._request_timeout = request_timeout
        self._proxy = proxy or None  # HTTP or SOCKS5 (httpx, with socksio for SOCKS)
        self._app: Application | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._offset = 0  # the next update id to fetch: everything below it is recorded
        self._inbound: InboundHandler | None = None
        self._typing_tasks: set[asyncio.Task[None]] = set()
        self._sending: set[asyncio.Task[Any]] = set()
        self._redact = RedactToken(token)
        self._sender = Sender(name, self._safe, network_retries=network_retries, retry_delay=retry_delay)
        self._drafts = TelegramDrafts(name, self._sender, stream_seconds)
        self._menu: tuple[MenuCommand, ...] = ()
        # Asked before each getUpdates when processes share a database (bot.channel.OneReceiver).
        self.may_receive: Callable[[], Awaitable[bool]] | None = None

    @property
    def receive_lock(self) -> str:
        """What only one process may poll: this bot's getUpdates (named by a digest of its token)."""
        return f"telegram:{hashlib.sha256(self._token.encode()).hexdigest()[:16]}"

    @property
    def bot_username(self) -> str | None:
        """The bot's @username without the @ (known after start)."""
        return self._bot_username

    def set_command_menu(self, commands: Sequence[MenuCommand]) -> None:
        """The commands to show in Telegram's menu; registered with setMyCommands at start."""
        self._menu = tuple(commands)

    # -- lifecycle ----------------------------------------------------------------------------

    def is_up(self) -> bool:
        """Receiving: the getUpdates loop runs (it ends only on stop or a revoked token)."""
        return self._poll_task is not None and not self._poll_task.done()

    async def start(self, inbound: InboundHandler) -> None:
        """Log in (getMe), then long-poll in the background; returns once polling runs."""
        if self._app is not None:
            raise ChannelError(f"{self.name}: already started")
        # httpx logs every request URL at INFO, and the URL holds the token.
        self._redact.install()
        app = self._build_app()
        try:
            await app.initialize()
        except TelegramError as exc:
            # The HTTP clients are open even when getMe failed.
            await app.bot.shutdown()
            self._redact.remove()
            if isinstance(exc, InvalidToken):
                # PTB's message quotes the token: keep it out of the chain.
                raise ChannelError(f"{self.name}: the bot token was refused") from None
            raise ChannelError(f"{self.name}: cannot reach the Bot API: {self._safe(exc)}") from exc
        self._app = app
        self._inbound = inbound
        self._bot_id = app.bot.id
        # getMe is the truth: a configured name that differs would make us miss (or take) commands.
        if app.bot.username:
            if self._bot_username and self._bot_username.lower() != app.bot.username.lower():
                log.warning("%s: configured bot_username @%s is not the bot's (@%s); using @%s",
                            self.name, self._bot_username, app.bot.username, app.bot.username)
            self._bot_username = app.bot.username
        try:
            await app.bot.delete_webhook(drop_pending_updates=False)
        except TelegramError as exc:
            await self.stop()
            raise ChannelError(f"{self.name}: polling could not start: {self._safe(exc)}") from exc
        await self._register_menu(app)
        self._poll_task = asyncio.create_task(self._poll_loop(app), name=f"{self.name}-poll")
        log.info("%s: polling as @%s", self.name, self._bot_username)

    async def _register_menu(self, app: Application) -> None:
        """setMyCommands with the menu; a failure only costs the menu, never the channel."""
        commands = telegram_menu(self._menu)
        if not commands:
            return
        try:
            await app.bot.set_my_commands(commands)
        except TelegramError as exc:
            log.warning("%s: setMyCommands failed, no command menu: %s", self.name, self._safe(exc))

    async def stop_receiving(self) -> None:
        """Stop long polling (updates not handed over stay on Telegram's side); sending still works.

        Every update handed over is in the gateway's inbox, so a last getUpdates confirms them
        (else the next start would fetch them again, and the inbox would drop them as repeats).
        """
        task, self._poll_task = self._poll_task, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        app = self._app
        if app is not None and self._offset:
            try:
                await app.bot.get_updates(offset=self._offset, timeout=timedelta(0), allowed_updates=list(ALLOWED_UPDATES))
            except TelegramError as exc:
                log.info("%s: could not confirm the last updates (%s); they will be fetched again", self.name, self._safe(exc))

    async def stop(self) -> None:
        """Stop polling, let in-flight sends finish (bounded), then close the HTTP clients."""
        if self._app is None:
            return
        await self.stop_receiving()
        app, self._app = self._app, None
        try:
            if app.running:
                await app.stop()
            pending = {t for t in self._sending if t is not asyncio.current_task()}
            if pending:
                await asyncio.wait(pending, timeout=self._request_timeout)
            for task in list(self._typing_tasks):
                task.cancel()
            if self._typing_tasks:
                await asyncio.wait(set(self._typing_tasks))
            await app.shutdown()
        finally:
            http, self._http = self._http, None
            if http is not None:
                await http.aclose()
            log.info("%s: stopped", self.name)
            self._redact.remove()

    def _build_app(self) -> Application:
        # No Updater: it confirms an update (the next getUpdates offset) as soon as it is queued,
        # before anyone has stored it. The poll loop below confirms only what the gateway recorded.
        builder = (
            ApplicationBuilder()
            .token(self._token)
            .updater(None)
            .rate_limiter(AIORateLimiter(max_retries=3))
            .job_queue(None)
            .connect_timeout(self._request_timeout)
            .read_timeout(self._request_timeout)
            .write_timeout(self._request_timeout)
            .pool_timeout(self._request_timeout)
            .get_updates_connect_timeout(self._request_timeout)
            .get_updates_read_timeout(self._request_timeout)
            .get_updates_pool_timeout(self._request_timeout)
        )
        if self._proxy:
            # Both of PTB's HTTP clients: the one that sends and the one that long-polls.
            builder = builder.proxy(self._proxy).get_updates_proxy(self._proxy)
        if self._base_url:
            builder = builder.base_url(self._base_url)
        builder = builder.base_file_url(self._files.base_file_url)
        return builder.build()

    # -- inbound ------------------------------------------------------------------------------

    async def _poll_loop(self, app: Application) -> None:
        """getUpdates, hand each update to the gateway, and confirm it (offset) only once it is
        recorded. An update the gateway could not record is fetched again after a pause."""
        failures = 0
        while True:
            if not await self._still_receiver():
                await asyncio.sleep(self._retry_delay)
                continue
            try:
                updates = await app.bot.get_updates(offset=self._offset or None,
                                                    timeout=timedelta(seconds=self._poll_timeout),
                                                    allowed_updates=list(ALLOWED_UPDATES))
            except TelegramError as exc:
                failures += 1
                self._on_poll_error(exc)
                await asyncio.sleep(_poll_backoff(failures, self._retry_delay))
                continue
            refused = await self._hand_on(updates)
            if refused is None:
                if updates:
                    self._offset = updates[-1].update_id + 1
                failures = 0
                continue
            # Not recorded: the offset stays before it, so Telegram hands it out again (with what
            # follows it; what of that is recorded now is recognised then).
            update_id, exc = refused
            self._offset = update_id
            failures += 1
            log.error("%s: update %s could not be recorded (%s); fetching it again", self.name, update_id, exc)
            await asyncio.sleep(_poll_backoff(failures, self._retry_delay))

    async def _hand_on(self, updates: Sequence[Update]) -> tuple[int, StoreError] | None:
        """Hand a getUpdates batch to the gateway: its chats at once, each chat's updates in
        order; returns the first update (by id) the gateway could not record, or None.

        One by one, a batch of 30 chats waited for 30 recordings in a row (a thread hop and a
        database commit each): 4-6 s before the last chat's message was even queued. At once,
        their commits share one (memory.store.connection.Store.write).
        """
        chats: dict[object, list[Update]] = {}
        for update in updates:
            chat = update.effective_chat
            chats.setdefault(chat.id if chat is not None else None, []).append(update)
        refused: list[tuple[int, StoreError]] = []

        async def in_order(chat_updates: list[Update]) -> None:
            for update in chat_updates:
                try:
                    await self._on_update(update)
                except StoreError as exc:
                    # The rest is still handed over, so each of its senders hears of the trouble
                    # (the gateway holds a chat's later messages behind its unrecorded one).
                    refused.append((update.update_id, exc))
                except Exception:
                    # A bug on our side: fetching the update again would stall every chat behind it.
                    log.exception("%s: handling update %s failed; skipped", self.name, update.update_id)

        await asyncio.gather(*(in_order(u) for u in chats.values()))
        return min(refused, key=lambda r: r[0]) if refused else None

    async def _still_receiver(self) -> bool:
        """Whether this process is (still) the bot's one receiver; while another is, polling
        would only make Telegram answer one of the two with 409 Conflict."""
        if self.may_receive is None:
            return True
        try:
            leads = await self.may_receive()
        except Exception as exc:  # the database is away: poll nothing until it says who leads
            log.warning("%s: cannot tell whether this process still receives (%s); not polling", self.name, exc)
            return False
        if not leads:
            log.info("%s: another process receives now; not polling", self.name)
        return leads

    async def _on_update(self, update: Update) -> None:
        if self._inbound is None:
            return
        try:
            message = message_from_update(
                update, channel=self.name, bot_id=self._bot_id, bot_username=self._bot_username
            )
        except Exception:
            # A malformed update would stall the bot if it were fetched again forever.
            log.exception("%s: update %s could not be read; skipped", self.name, update.update_id)
            return
        if message is None:
            return
        log.debug("%s: inbound %s in %s", self.name, message.kind, message.conversation_key)
        await self._inbound(message)

    def _on_poll_error(self, exc: TelegramError) -> None:
        log.warning("%s: getUpdates failed, retrying: %s", self.name, self._safe(exc))

    # -- outbound -----------------------------------------------------------------------------

    def split(self, reply: Reply) -> list[Reply]:
        """The reply as the messages `send` delivers one at a time (outbound.split_reply)."""
        return split_reply(reply)

    async def send(self, reply: Reply) -> None:
        """Deliver one reply (outbound.Sender); raises ChannelError on a final failure."""
        app = self._require_app()
        task = asyncio.current_task()
        if task is not None:
            self._sending.add(task)
        try:
            if reply.extra.get(DRAFT) or reply.extra.get(DRAFT_DROP):
                await self._drafts.finish(app, reply)   # it replaces what was shown while it was written
            else:
                await self._sender.send(app, reply)
        finally:
            if task is not None:
                self._sending.discard(task)

    def open_draft(self, reply: Reply, handles: Sequence[str] = ()) -> TelegramDraft | None:
        """The reply shown growing while it is written (bot.channel.ShowsDrafts); None when replies
        are sent whole (`stream_seconds` 0) or the channel is not started."""
        return self._drafts.open(self._app, reply, handles) if self._app is not None else None

    async def fetch_media(self, media: Media, *, max_bytes: int, timeout: float) -> bytes:
        """A photo, voice note or file of an inbound message (bot.channel.FetchesMedia)."""
        bot = self._require_app().bot
        if self._http is None:
            # Streamed downloads (the cap holds as bytes arrive), through the same proxy as the Bot API.
            self._http = httpx.AsyncClient(proxy=self._proxy, timeout=self._request_timeout, follow_redirects=False)
        return await fetch_file(bot, self._http, self._files, media, max_bytes=max_bytes, timeout=timeout, safe=self._safe)

    # -- typing -------------------------------------------------------------------------------

    @asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        """Send "typing" now and every few seconds until the block exits."""
        app = self._app
        if app is None:
            # Not started yet: a process taking a bot over answers the adopted turns while the
            # channel still logs in. A typing hint is cosmetic; the turn must not fail for it.
            yield
            return
        chat_id = api_chat_id(message.chat_id)
        thread_id = int(message.thread_id) if message.thread_id else None
        task = asyncio.create_task(self._typing_loop(app, chat_id, thread_id), name=f"{self.name}-typing")
        self._typing_tasks.add(task)
        task.add_done_callback(self._typing_tasks.discard)
        try:
            yield
        finally:
            task.cancel()
            # wait() never raises the task's CancelledError, so our own cancellation still does.
            await asyncio.wait({task})

    async def _typing_loop(self, app: Application, chat_id: int | str, thread_id: int | None) -> None:
        while True:
            try:
                await app.bot.send_chat_action(chat_id=chat_id, action=ChatAction.TYPING, message_thread_id=thread_id)
            except TelegramError as exc:
                # A lost typing hint is harmless; the reply still goes out.
                log.debug("%s: sendChatAction failed: %s", self.name, self._safe(exc))
            await asyncio.sleep(self._typing_interval)

    def _safe(self, exc: BaseException) -> str:
        """The error text with the token blanked (some PTB and httpx messages quote it)."""
        return str(exc).replace(self._token, "<token>")

    def _require_app(self) -> Application:
        if self._app is None:
            raise ChannelError(f"{self.name}: not started")
        return self._app


def _poll_backoff(failures: int, base: float) -> float:
    """Seconds before polling again after `failures` failures in a row: base * 2^(n-1), at most 30."""
    return min(30.0, base * 2 ** max(0, failures - 1))
