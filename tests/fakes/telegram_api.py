"""A fake Telegram Bot API server on 127.0.0.1, close enough for python-telegram-bot to talk to.

It speaks `/bot<token>/<method>` with form, multipart (JSON-encoded nested fields) or JSON bodies
and answers `{"ok": true, "result": ...}` or `{"ok": false, "error_code", "description",
"parameters"}` like Telegram. Tests inject user messages (`inject_message`), then read what the
bot sent (`sent`, `wait_for_sent`, `actions`) and script failures (`rate_limit_next`,
`fail_parse_next`, `fail_network_next`).

    async with FakeTelegram() as tg:
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url)
        tg.inject_message(42, "hello")
        first = (await tg.wait_for_sent(1))[0]
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["BOT_ID", "FakeTelegram", "parse_telegram_html", "utf16_len"]

BOT_ID = 7000001
TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024

# Fields Telegram reads as plain strings; everything else in a form body is JSON-encoded by the
# client when it is not a string (ints, lists, objects).
_STRING_FIELDS = frozenset(
    {"text", "caption", "parse_mode", "action", "emoji", "title", "description", "short_description", "url"}
)
_ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre", "span", "tg-spoiler", "tg-emoji", "blockquote"}
)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)((?:\s+[A-Za-z-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))?)*)\s*>")
_ATTR = re.compile(r"([A-Za-z-]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+)))?")
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{3,32}")
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?")
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")


def utf16_len(s: str) -> int:
    """Length in UTF-16 code units: how Telegram counts message length and entity offsets."""
    return len(s.encode("utf-16-le")) // 2


class HtmlParseError(ValueError):
    """Telegram would answer "can't parse entities" with this reason."""


def parse_telegram_html(text: str) -> str:
    """Check `text` the way Telegram's HTML parse mode does; return the visible text.

    Only Telegram's tags (b, i, u, s, a href, code, pre, span.tg-spoiler, blockquote, ...) and
    the entities &lt; &gt; &amp; &quot; and numeric ones are accepted; tags must nest properly.

    Raises:
        HtmlParseError: the reason Telegram would give.
    """
    out: list[str] = []
    stack: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == "<":
            m = _TAG.match(text, pos)
            offset = len(text[:pos].encode())
            if not m:
                raise HtmlParseError(f"Unclosed start tag at byte offset {offset}")
            closing, name, attrs = m.group(1) == "/", m.group(2).lower(), m.group(3)
            if name not in _ALLOWED_TAGS:
                raise HtmlParseError(f'Unsupported start tag "{name}" at byte offset {offset}')
            if closing:
                if not stack:
                    raise HtmlParseError(f"Unexpected end tag at byte offset {offset}")
                if stack[-1] != name:
                    raise HtmlParseError(
                        f'Unmatched end tag at byte offset {offset}, expected "</{stack[-1]}>", found "</{name}>"'
                    )
                stack.pop()
            else:
                _check_open_tag(name, attrs, stack, offset)
                stack.append(name)
            pos = m.end()
            continue
        if ch == "&":
            m = _ENTITY.match(text, pos)
            if not m:
                offset = len(text[:pos].encode())
                raise HtmlParseError(f"Unsupported HTML entity at byte offset {offset}")
            out.append(html.unescape(m.group(0)))
            pos = m.end()
            continue
        out.append(ch)
        pos += 1
    if stack:
        raise HtmlParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


def _check_open_tag(name: str, attrs: str, stack: list[str], offset: int) -> None:
    """Attributes and nesting Telegram accepts for one start tag."""
    found = {m.group(1).lower(): next((g for g in m.groups()[1:] if g is not None), "") for m in _ATTR.finditer(attrs)}
    if stack and stack[-1] in ("code", "pre") and not (name == "code" and stack[-1] == "pre"):
        raise HtmlParseError(f'Can\'t use tag "{name}" inside "{stack[-1]}" at byte offset {offset}')
    if name == "a":
        if "href" not in found or "a" in stack:
            raise HtmlParseError(f"Bad link at byte offset {offset}")
    elif name == "code" and "class" in found:
        if not (stack and stack[-1] == "pre" and found["class"].startswith("language-")):
            raise HtmlParseError(f"Unsupported code class at byte offset {offset}")
    elif name == "span" and found.get("class") != "tg-spoiler":
        raise HtmlParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {offset}')


class FakeTelegram:
    """An in-process Bot API server with a test API for injecting updates and reading sends."""

    def __init__(
        self,
        token: str = "123456:TEST-token",
        *,
        bot_username: str = "memgate_test_bot",
        bot_first_name: str = "Memgate",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token = token
        self.bot_username = bot_username
        self.bot_first_name = bot_first_name
        self.bot_id = BOT_ID
        self._clock = clock
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._updates: list[dict[str, Any]] = []
        self._confirmed = 0  # every update id below this was confirmed by a getUpdates offset
        self._allowed_updates: list[str] = []
        # Replaced on every change; waiters hold the old one, which is set to wake them.
        self._changed = asyncio.Event()
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}
        self._rate_limited: list[int] = []
        self._parse_failures = 0
        self._network_failures = 0
        self._blocked: set[int] = set()
        self.sent: list[dict[str, Any]] = []
        # Like Telegram: a getUpdates while another one is open fails with 409 Conflict (two
        # processes polling one bot); counted so a test can assert there was only ever one poller.
        self._poller: tuple[asyncio.Task, web.Request] | None = None
        self.conflicts = 0
        self.actions: list[dict[str, Any]] = []
        self.edits: list[dict[str, Any]] = []
        self.deleted: list[tuple[int, int]] = []
        # Flood control for editMessageText, as Telegram applies it to bots: a chat's messages edited
        # more often than once per `edit_interval` seconds (the fake's clock) answer 429 retry_after.
        self.edit_interval: float | None = None
        self.refuse_edits = False   # every edit answers 429 (a flood that outlasts the client's retries)
        self._last_edit: dict[int, float] = {}
        self.floods = 0
        self.commands: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.rejected: list[dict[str, Any]] = []
        # Files people sent, by file id (getFile + the download serve them), and what was fetched.
        self.files: dict[str, bytes] = {}
        self.file_paths: dict[str, str] = {}
        self.downloads: list[str] = []
        # A download that sends more than getFile announced: file id -> bytes to stream (the bytes
        # actually written before the client hung up are counted in `streamed`).
        self.oversized: dict[str, int] = {}
        self.streamed: dict[str, int] = {}
        self.stream_ends: dict[str, int] = {}  # file id -> bytes written when the stream ended

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind to 127.0.0.1 on an ephemeral port and serve."""
        if self._runner is not None:
            return
        app = web.Application(client_max_size=60 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._dispatch)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def stop(self) -> None:
        """Close the server; long polls still held are cancelled."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """What python-telegram-bot's `base_url` wants: it appends the token itself."""
        if self._port is None:
            raise RuntimeError("FakeTelegram is not started")
        return f"http://127.0.0.1:{self._port}/bot"

    @property
    def base_file_url(self) -> str:
        """python-telegram-bot's `base_file_url`: downloads are GET <this><token>/<file_path>."""
        if self._port is None:
            raise RuntimeError("FakeTelegram is not started")
        return f"http://127.0.0.1:{self._port}/file/bot"

    # -- test API: inbound --------------------------------------------------------------------

    def inject_message(
        self,
        user_id: int,
        text: str | None = None,
        *,
        chat_id: int | None = None,
        chat_type: str = "private",
        chat_title: str | None = None,
        is_forum: bool = False,
        username: str | None = None,
        first_name: str = "Alice",
        last_name: str | None = None,
        entities: list[dict[str, Any]] | None = None,
        reply_to_message: dict[str, Any] | int | None = None,
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        photo: bool = False,
        caption: str | None = None,
        voice: bool = False,
        sticker: bool = False,
        document: str | None = None,
        video: bool = False,
        edited: bool = False,
        audio: bool = False,
        file_data: bytes | None = None,
        mime_type: str | None = None,
        duration: int = 3,
        message_id: int | None = None,
        date: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue an update with a user's message; return the message dict (as the bot will see it).

        Entities for "/command" and "@username" are added like Telegram does when `entities` is
        None. `reply_to_message` is a message dict or the id of a message in the same chat
        (e.g. one the bot sent). `edited=True` sends an `edited_message` of `message_id`.
        `document` is a file name. `file_data` is the attachment's content, served by getFile and
        the download (its size is announced as Telegram does). `extra` is merged into the message as is.
        """
        chat_id = user_id if chat_id is None else chat_id
        now = int(self._clock()) if date is None else date
        original = self._messages.get((chat_id, message_id)) if edited and message_id is not None else None
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if last_name:
            user["last_name"] = last_name
        if username:
            user["username"] = username
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat.update({k: v for k, v in user.items() if k in ("first_name", "last_name", "username")})
        else:
            chat["title"] = chat_title or "Test group"
            if is_forum:
                chat["is_forum"] = True
        msg_id = message_id if message_id is not None else next(self._message_ids)
        sent_at = original["date"] if original else now
        msg: dict[str, Any] = {"message_id": msg_id, "date": sent_at, "chat": chat, "from": user}
        if text is not None and not (photo or voice or sticker or document or video or audio):
            msg["text"] = text
            found = _auto_entities(text) if entities is None else entities
            if found:
                msg["entities"] = found
        file_id = f"file-{msg_id}"
        size = len(file_data) if file_data is not None else 50000
        if file_data is not None:
            self.files[file_id] = file_data
        if photo:
            msg["photo"] = [
                {"file_id": f"{file_id}-s", "file_unique_id": f"u{msg_id}s", "width": 90, "height": 90, "file_size": 1000},
                {"file_id": file_id, "file_unique_id": f"u{msg_id}", "width": 800, "height": 800, "file_size": size},
            ]
        if voice:
            msg["voice"] = {"file_id": file_id, "file_unique_id": f"u{msg_id}", "duration": duration,
                            "mime_type": mime_type or "audio/ogg", "file_size": size}
        if audio:
            msg["audio"] = {"file_id": file_id, "file_unique_id": f"u{msg_id}", "duration": duration,
                            "mime_type": mime_type or "audio/mpeg", "file_size": size, "file_name": "audio.mp3"}
        if sticker:
            msg["sticker"] = {
                "file_id": file_id,
                "file_unique_id": f"u{msg_id}",
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "👍",
            }
        if document:
            msg["document"] = {"file_id": file_id, "file_unique_id": f"u{msg_id}", "file_name": document, "file_size": size,
                               **({"mime_type": mime_type} if mime_type else {})}
        if video:
            msg["video"] = {"file_id": file_id, "file_unique_id": f"u{msg_id}", "width": 640, "height": 360, "duration": 5}
        media_text = caption if caption is not None else (text if (photo or voice or document or video or audio) else None)
        if media_text is not None:
            msg["caption"] = media_text
            found = _auto_entities(media_text) if entities is None else entities
            if found:
                msg["caption_entities"] = found
        if message_thread_id is not None:
            msg["message_thread_id"] = message_thread_id
        if is_topic_message:
            msg["is_topic_message"] = True
        if reply_to_message is not None:
            msg["reply_to_message"] = self._resolve_reply(chat_id, reply_to_message)
        if edited:
            msg["edit_date"] = now
        if extra:
            msg.update(extra)
        self._messages[(chat_id, msg_id)] = msg
        self._push_update({"edited_message" if edited else "message": msg})
        return msg

    def inject_group_message(
        self,
        user_id: int,
        text: str | None = None,
        *,
        chat_id: int = -1001000000001,
        chat_type: str = "supergroup",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """inject_message into a group (a supergroup by default)."""
        return self.inject_message(user_id, text, chat_id=chat_id, chat_type=chat_type, **kwargs)

    def mention(self, text: str = "") -> str:
        """'@<bot username> text': a group message addressed to the bot."""
        return f"@{self.bot_username} {text}".rstrip()

    def inject_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update (its update_id is assigned); return the id."""
        return self._push_update(dict(update))

    def bot_message(self, chat_id: int, message_id: int) -> dict[str, Any]:
        """A message the bot sent (or a user message) by chat and id, for building replies."""
        return self._messages[(chat_id, message_id)]

    @property
    def pending_updates(self) -> int:
        """Updates not yet confirmed by the client's getUpdates offset."""
        return sum(1 for u in self._updates if u["update_id"] >= self._confirmed)

    # -- test API: outbound -------------------------------------------------------------------

    async def wait_for_sent(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least n messages/documents were sent; return the first n."""
        await self._wait(lambda: len(self.sent) >= n, timeout, f"{n} sent messages (have {len(self.sent)})")
        return self.sent[:n]

    async def wait_for_actions(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least n chat actions were sent; return the first n."""
        await self._wait(lambda: len(self.actions) >= n, timeout, f"{n} chat actions (have {len(self.actions)})")
        return self.actions[:n]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until predicate() holds (rechecked on every request and every 20 ms)."""
        await self._wait(predicate, timeout, "condition")

    def sent_texts(self, chat_id: int | None = None) -> list[str]:
        """The text (or caption) of every sent message, optionally for one chat."""
        return [s.get("text") or s.get("caption") or "" for s in self.sent if chat_id is None or s["chat_id"] == chat_id]

    # -- test API: failures -------------------------------------------------------------------

    def rate_limit_next(self, n: int, retry_after: int = 1) -> None:
        """The next n sendMessage/sendDocument calls answer 429 with parameters.retry_after."""
        if retry_after < 1:
            raise ValueError("Telegram's retry_after is at least 1 second")
        self._rate_limited.extend([retry_after] * n)

    def fail_parse_next(self, n: int) -> None:
        """The next n sendMessage calls that carry a parse_mode answer 400 can't parse entities."""
        self._parse_failures += n

    def block(self, chat_id: int) -> None:
        """The user of this private chat blocked the bot: every send there answers 403 Forbidden."""
        self._blocked.add(chat_id)

    def fail_network_next(self, n: int) -> None:
        """The next n send calls answer 502 Bad Gateway (a network error to the client)."""
        self._network_failures += n

    # -- server side --------------------------------------------------------------------------

    async def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            await asyncio.wait_for(self._until(predicate), timeout)
        except TimeoutError:
            raise AssertionError(f"FakeTelegram: timed out after {timeout}s waiting for {what}") from None

    async def _until(self, predicate: Callable[[], bool], poll: float = 0.02) -> None:
        """Recheck on every change of the fake, and now and then for state the fake cannot see."""
        while not predicate():
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), poll)
            except TimeoutError:
                pass

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _push_update(self, update: dict[str, Any]) -> int:
        update_id = next(self._update_ids)
        update["update_id"] = update_id
        self._updates.append(update)
        self._notify()
        return update_id

    def _resolve_reply(self, chat_id: int, ref: dict[str, Any] | int) -> dict[str, Any]:
        if isinstance(ref, dict):
            return ref
        try:
            return self._messages[(chat_id, ref)]
        except KeyError:
            raise KeyError(f"no message {ref} in chat {chat_id} to reply to") from None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        params = await _read_params(request)
        self.calls.append(method)
        self._notify()
        handler = self._methods().get(method.lower())
        if handler is None:
            return _error(404, "Not Found: method not found")
        chat_id = params.get("chat_id")
        # Chats are numeric ids or "@channelname"; anything else names no chat.
        if isinstance(chat_id, str) and not chat_id.startswith("@"):
            return _error(400, "Bad Request: chat not found")
        try:
            if handler == self._get_updates:
                return await self._get_updates(params, request)
            return await handler(params)
        finally:
            self._notify()

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "getme": self._get_me,
            "deletewebhook": self._true,
            "setmycommands": self._set_my_commands,
            "getmycommands": self._get_my_commands,
            "getupdates": self._get_updates,
            "sendmessage": self._send_message,
            "sendchataction": self._send_chat_action,
            "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message,
            "senddocument": self._send_document,
            "sendphoto": self._send_photo,
            "getfile": self._get_file,
        }

    def _bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_first_name,
            "username": self.bot_username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _get_me(self, params: dict[str, Any]) -> web.Response:
        return _ok(self._bot_user())

    async def _true(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _set_my_commands(self, params: dict[str, Any]) -> web.Response:
        """Telegram's checks: at most 100 commands, names of 1-32 a-z/0-9/_, descriptions of 1-256 characters."""
        commands = params.get("commands")
        if not isinstance(commands, list):
            return _error(400, "Bad Request: commands must be a list")
        if len(commands) > 100:
            return _error(400, "Bad Request: too many commands specified")
        for item in commands:
            name = item.get("command") if isinstance(item, dict) else None
            description = item.get("description") if isinstance(item, dict) else None
            if not isinstance(name, str) or not _COMMAND_NAME.fullmatch(name):
                return _error(400, "Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description.strip()) <= 256:
                return _error(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands = commands
        return _ok(True)

    async def _get_my_commands(self, params: dict[str, Any]) -> web.Response:
        return _ok(self.commands)

    async def _get_updates(self, params: dict[str, Any], request: web.Request | None = None) -> web.Response:
        offset = int(params.get("offset") or 0)
        limit = max(1, min(100, int(params.get("limit") or 100)))
        timeout = float(params.get("timeout") or 0)
        if "allowed_updates" in params and params["allowed_updates"] is not None:
            # Telegram remembers the last list; an empty list means "all but a few".
            self._allowed_updates = list(params["allowed_updates"])
        # Telegram serves the newest getUpdates and ends an open earlier one with 409 Conflict.
        # Counted as a conflict when that earlier request still had a live client (two pollers);
        # one whose client is gone (killed, or gave up on it) is just dropped.
        previous = self._poller
        if previous is not None and not previous[0].done():
            previous[0].cancel()
        me = asyncio.current_task()
        assert me is not None and request is not None
        self._poller = (me, request)
        try:
            return await self._poll(offset, limit, timeout)
        except asyncio.CancelledError:
            if self._poller is not None and self._poller[0] is not me:
                transport = request.transport
                if transport is not None and not transport.is_closing():
                    self.conflicts += 1
                    return _error(409, "Conflict: terminated by other getUpdates request; "
                                       "make sure that only one bot instance is running")
                return _error(499, "client gone")
            raise
        finally:
            if self._poller is not None and self._poller[0] is me:
                self._poller = None

    async def _poll(self, offset: int, limit: int, timeout: float) -> web.Response:
        if offset > self._confirmed:
            self._confirmed = offset
            self._updates = [u for u in self._updates if u["update_id"] >= offset]

        def ready() -> list[dict[str, Any]]:
            return [u for u in self._updates if u["update_id"] >= self._confirmed and self._allowed(u)][:limit]

        found = ready()
        if not found and timeout > 0:
            try:
                await asyncio.wait_for(self._until(lambda: bool(ready()), poll=1.0), timeout)
            except TimeoutError:
                pass
            found = ready()
        return _ok(found)

    def _allowed(self, update: dict[str, Any]) -> bool:
        if not self._allowed_updates:
            return True
        return any(key in update for key in self._allowed_updates)

    def _take_scripted_failure(self, params: dict[str, Any] | None = None) -> web.Response | None:
        if params is not None and _as_int(params.get("chat_id")) in self._blocked:
            return _error(403, "Forbidden: bot was blocked by the user")
        if self._network_failures:
            self._network_failures -= 1
            return _error(502, "Bad Gateway")
        if self._rate_limited:
            retry_after = self._rate_limited.pop(0)
            return _error(429, f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after})
        return None

    async def _send_message(self, params: dict[str, Any]) -> web.Response:
        failure = self._take_scripted_failure(params)
        if failure is not None:
            self.rejected.append({"method": "sendMessage", **params})
            return failure
        chat_id = params.get("chat_id")
        text = params.get("text")
        if chat_id is None:
            return _error(400, "Bad Request: chat_id is empty")
        if not text:
            return _error(400, "Bad Request: message text is empty")
        checked = self._check_text(text, params.get("parse_mode"), TEXT_LIMIT, "message is too long")
        if isinstance(checked, web.Response):
            self.rejected.append({"method": "sendMessage", **params})
            return checked
        if not checked.strip():
            return _error(400, "Bad Request: message text is empty")
        message = self._store_bot_message(params, {"text": checked})
        self.sent.append({"method": "sendMessage", **params, "visible_text": checked, "message_id": message["message_id"],
                          "at": self._clock()})
        return _ok(message)

    def _check_text(self, text: str, parse_mode: str | None, limit: int, too_long: str) -> str | web.Response:
        """The visible text, or the 400 Telegram gives for a bad parse or an over-long text."""
        visible = text
        if parse_mode:
            if self._parse_failures:
                self._parse_failures -= 1
                return _error(400, "Bad Request: can't parse entities: scripted failure at byte offset 0")
            if parse_mode.upper() == "HTML":
                try:
                    visible = parse_telegram_html(text)
                except HtmlParseError as exc:
                    return _error(400, f"Bad Request: can't parse entities: {exc}")
        if utf16_len(visible) > limit:
            return _error(400, f"Bad Request: {too_long}")
        return visible

    async def _send_chat_action(self, params: dict[str, Any]) -> web.Response:
        if params.get("chat_id") is None or not params.get("action"):
            return _error(400, "Bad Request: chat_id and action are required")
        self.actions.append({k: params.get(k) for k in ("chat_id", "action", "message_thread_id")})
        return _ok(True)

    async def _edit_message_text(self, params: dict[str, Any]) -> web.Response:
        if _as_int(params.get("chat_id")) in self._blocked:
            return _error(403, "Forbidden: bot was blocked by the user")
        chat_id, message_id = _as_int(params.get("chat_id")), _as_int(params.get("message_id"))
        stored = self._messages.get((chat_id, message_id))
        if stored is None:
            return _error(400, "Bad Request: message to edit not found")
        if "text" not in stored:
            return _error(400, "Bad Request: there is no text in the message to edit")
        checked = self._check_text(params.get("text") or "", params.get("parse_mode"), TEXT_LIMIT, "message is too long")
        if isinstance(checked, web.Response):
            return checked
        if not checked.strip():
            return _error(400, "Bad Request: text must be non-empty")
        if checked == stored.get("text"):
            return _error(400, "Bad Request: message is not modified: specified new message content and reply markup "
                               "are exactly the same as a current content and reply markup of the message")
        now = self._clock()
        if self.refuse_edits or (self.edit_interval is not None
                                 and now - self._last_edit.get(chat_id, -1e18) < self.edit_interval):
            self.floods += 1
            self.rejected.append({"method": "editMessageText", **params})
            return _error(429, "Too Many Requests: retry after 1", {"retry_after": 1})
        self._last_edit[chat_id] = now
        stored["text"] = checked
        stored["edit_date"] = int(now)
        self.edits.append({**params, "visible_text": checked, "at": now})
        return _ok(stored)

    async def _delete_message(self, params: dict[str, Any]) -> web.Response:
        key = (_as_int(params.get("chat_id")), _as_int(params.get("message_id")))
        if key not in self._messages:
            return _error(400, "Bad Request: message to delete not found")
        del self._messages[key]
        self.deleted.append(key)
        return _ok(True)

    def shown(self, chat_id: int) -> list[str]:
        """What the chat shows now: the text of each message the bot sent there and did not delete,
        as last edited, in order."""
        return [m.get("text") or m.get("caption") or "" for (c, _), m in sorted(self._messages.items())
                if c == chat_id and m.get("from", {}).get("id") == self.bot_id]

    async def _send_document(self, params: dict[str, Any]) -> web.Response:
        def media(upload: _Upload, n: int) -> dict[str, Any]:
            doc = {"file_id": f"doc-{n}", "file_unique_id": f"d{n}", "file_name": upload.filename}
            return doc | ({"mime_type": upload.content_type} if upload.content_type else {})

        return await self._send_upload(params, "sendDocument", "document", media)

    async def _get_file(self, params: dict[str, Any]) -> web.Response:
        """getFile: a File with the path the download takes; the Bot API's 20 MB limit applies."""
        file_id = str(params.get("file_id") or "")
        data = self.files.get(file_id)
        if data is None:
            return _error(400, "Bad Request: invalid file_id")
        if len(data) > 20 * 1024 * 1024:
            return _error(400, "Bad Request: file is too big")
        path = self.file_paths.setdefault(file_id, f"documents/file_{len(self.file_paths)}")
        return _ok({"file_id": file_id, "file_unique_id": f"u-{file_id}", "file_size": len(data), "file_path": path})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """GET /file/bot<token>/<file_path>: the bytes getFile pointed at."""
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        file_id = next((f for f, p in self.file_paths.items() if p == path), None)
        if file_id is None:
            return web.Response(status=404)
        self.downloads.append(file_id)
        if file_id in self.oversized:
            return await self._stream_oversized(request, file_id)
        return web.Response(body=self.files[file_id], content_type="application/octet-stream")

    async def _stream_oversized(self, request: web.Request, file_id: str) -> web.StreamResponse:
        """A server that announced a small file and sends far more, without a Content-Length."""
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        chunk, total = b"x" * 65536, self.oversized[file_id]
        self.streamed[file_id] = 0
        try:
            while self.streamed[file_id] < total:
                await resp.write(chunk)
                self.streamed[file_id] += len(chunk)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what it took is counted
        finally:
            self.stream_ends[file_id] = self.streamed[file_id]
            self._notify()
        return resp

    async def _send_photo(self, params: dict[str, Any]) -> web.Response:
        def media(upload: _Upload, n: int) -> list[dict[str, Any]]:
            return [{"file_id": f"photo-{n}", "file_unique_id": f"p{n}", "width": 640, "height": 320}]

        return await self._send_upload(params, "sendPhoto", "photo", media, image=True)

    async def _send_upload(self, params: dict[str, Any], method: str, field: str,
                           media: Callable[[_Upload, int], Any], *, image: bool = False) -> web.Response:
        """sendDocument / sendPhoto: the uploaded file under `field`, an optional caption checked
        like a message; `image` uploads must decode (Telegram reads what it is sent)."""
        failure = self._take_scripted_failure(params)
        if failure is not None:
            self.rejected.append({"method": method, **{k: v for k, v in params.items() if k != field}})
            return failure
        upload = params.get(field)
        if not isinstance(upload, _Upload):
            return _error(400, f"Bad Request: there is no {field} in the request")
        if image and not upload.data.startswith(b"\x89PNG\r\n\x1a\n") and not upload.data.startswith(b"\xff\xd8"):
            return _error(400, "Bad Request: IMAGE_PROCESS_FAILED")
        fields: dict[str, Any] = {}
        caption = params.get("caption")
        if caption:
            checked = self._check_text(caption, params.get("parse_mode"), CAPTION_LIMIT, "message caption is too long")
            if isinstance(checked, web.Response):
                return checked
            fields["caption"] = checked
        fields[field] = media(upload, len(self.sent))
        message = self._store_bot_message(params, fields)
        record = {k: v for k, v in params.items() if k != field}
        record.update(method=method, filename=upload.filename, data=upload.data, mime=upload.content_type,
                      message_id=message["message_id"], visible_text=fields.get("caption", ""))
        self.sent.append(record)
        return _ok(message)

    def _store_bot_message(self, params: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        chat_id = _as_int(params["chat_id"])
        chat: dict[str, Any] = {"id": chat_id, "type": "private" if isinstance(chat_id, int) and chat_id > 0 else "supergroup"}
        if chat["type"] != "private":
            chat["title"] = "Test group"
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(self._clock()),
            "chat": chat,
            "from": self._bot_user(),
            **fields,
        }
        if params.get("message_thread_id") is not None:
            message["message_thread_id"] = params["message_thread_id"]
            message["is_topic_message"] = True
        self._messages[(chat_id, message["message_id"])] = message
        return message


class _Upload:
    """A file part of a multipart request."""

    __slots__ = ("content_type", "data", "filename")

    def __init__(self, filename: str, data: bytes, content_type: str | None) -> None:
        self.filename = filename
        self.data = data
        self.content_type = content_type


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Decode a JSON, form or multipart body; non-string fields are JSON inside the form."""
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.json() if request.can_read_body else {}
        params.update(body or {})
        return params
    if request.method == "POST" and request.can_read_body:
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                params[key] = _Upload(value.filename, value.file.read(), value.content_type)
            else:
                params[key] = value
    for key, value in list(params.items()):
        # A field may point at a file part by name: "attach://<part name>".
        if isinstance(value, str) and value.startswith("attach://") and isinstance(params.get(value[9:]), _Upload):
            params[key] = params.pop(value[9:])
    for key, value in list(params.items()):
        if isinstance(value, str) and key not in _STRING_FIELDS:
            try:
                params[key] = json.loads(value)
            except ValueError:
                pass
    return params


def _auto_entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram adds on its own: a leading /command and @mentions (UTF-16 offsets)."""
    entities = []
    command = _COMMAND.match(text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command.group(0))})
    for m in _MENTION.finditer(text):
        if command and m.start() < command.end():
            continue
        entities.append({"type": "mention", "offset": utf16_len(text[: m.start()]), "length": utf16_len(m.group(0))})
    return entities


def _as_int(value: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=code)
