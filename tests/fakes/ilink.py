"""A fake WeChat iLink server (aiohttp, 127.0.0.1) that is strict where the real one is.

It checks every header of every call, holds getupdates until a message arrives or its advertised
long-poll timeout ends, acknowledges messages only through the cursor the client sends back
(so a client that forgets its cursor sees duplicates: `duplicates()`), hands out a context_token
per inbound message and refuses a send without a valid one (ret -2), and scripts the QR login.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import re
import secrets
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

BOT_PATH = "/ilink/bot/"
QR_CODE_PATH = "/ilink/bot/get_bot_qrcode"
QR_STATUS_PATH = "/ilink/bot/get_qrcode_status"
BOT_ENDPOINTS = ("getupdates", "sendmessage", "getconfig", "sendtyping", "msg/notifystart", "msg/notifystop")
SESSION_ENDPOINTS = ("sendmessage", "getconfig", "sendtyping")  # answered -14 once the token expired
CDN_PATH = "/c2c/download"  # WeChat's media CDN: GET ?encrypted_query_param=..., AES-128-ECB bytes
BASE_TIME_MS = 1_767_258_000_000  # 2026-01-01 09:00 UTC
MESSAGE_ID_BASE = 7_300_000_000_000_000_000  # above 2**53: ids must survive as exact integers
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class SentMessage:
    to_user_id: str
    text: str
    context_token: str
    client_id: str


@dataclass(frozen=True)
class TypingCall:
    user_id: str
    status: int


@dataclass
class _Inbound:
    seq: int
    user_id: str
    payload: dict[str, Any]


@dataclass
class FakeIlink:
    """The fake server. Use as `async with FakeIlink() as fake:`; `fake.base_url` is its address."""

    longpoll_ms: int = 200
    batch_limit: int = 8
    qr_statuses: Iterable[str] = ("wait", "scaned", "confirmed")
    app_id: str = "bot"
    bot_id: str = "fakebot@im.bot"
    owner_id: str = "owner@im.wechat"
    verify_code: str = "4321"

    # records, for assertions
    sent: list[SentMessage] = field(default_factory=list)
    typing: list[TypingCall] = field(default_factory=list)
    header_errors: list[str] = field(default_factory=list)
    protocol_errors: list[str] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    expired_calls: Counter[str] = field(default_factory=Counter)  # refused with -14 (dead login)
    deliveries: Counter[int] = field(default_factory=Counter)
    redeliveries: Counter[int] = field(default_factory=Counter)  # handed out again after their ack
    qr_polls: list[tuple[str, str | None, str]] = field(default_factory=list)  # (qrcode, verify_code, host)
    qr_local_tokens: list[list[str]] = field(default_factory=list)
    uins: list[str] = field(default_factory=list)
    acked_seq: int = 0

    def __post_init__(self) -> None:
        self.token = self._new_token()
        self._tokens = {self.token}
        self._expired_tokens: set[str] = set()
        self._log: list[_Inbound] = []
        self._bufs: dict[str, int] = {}
        self._context: dict[str, list[str]] = {}
        self._tickets: dict[str, str] = {}
        self._client_ids: set[str] = set()
        self._fail_send: deque[int] = deque()
        self._fail_http: dict[str, deque[tuple[int, str | None]]] = {}
        self._qr_script = deque(self.qr_statuses)
        self._qr_current: str | None = None
        self._qr_count = 0
        self._awaiting_code = False
        self._redirect_host: str | None = None
        self._wakeup = asyncio.Event()
        self._sent_event = asyncio.Event()
        self.cdn: dict[str, bytes] = {}        # download parameter -> the encrypted bytes served
        self.cdn_downloads: list[str] = []
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application(middlewares=[self._count])
        app.router.add_post(QR_CODE_PATH, self._get_bot_qrcode)
        app.router.add_get(QR_STATUS_PATH, self._get_qrcode_status)
        app.router.add_post(BOT_PATH + "getupdates", self._getupdates)
        app.router.add_post(BOT_PATH + "sendmessage", self._sendmessage)
        app.router.add_post(BOT_PATH + "getconfig", self._getconfig)
        app.router.add_post(BOT_PATH + "sendtyping", self._sendtyping)
        app.router.add_post(BOT_PATH + "msg/notifystart", self._notify)
        app.router.add_post(BOT_PATH + "msg/notifystop", self._notify)
        app.router.add_get(CDN_PATH, self._cdn_download)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.base_url

    async def stop(self) -> None:
        self._closing = True
        self._wake()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeIlink:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- test controls --------------------------------------------------------------------------

    def credentials_json(self) -> dict[str, str]:
        """The stored-login JSON for the current token, as `memgate wechat login` would write it."""
        return {
            "bot_token": self.token,
            "ilink_bot_id": self.bot_id,
            "baseurl": self.base_url,
            "ilink_user_id": self.owner_id,
        }

    def write_credentials(self, data_dir: Path, filename: str = "wechat_credentials.json") -> Path:
        """Write the current login into `data_dir` (mode 600), like a finished QR login."""
        path = Path(data_dir) / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".fake.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.credentials_json(), fh)
        os.replace(tmp, path)
        return path

    def inject(
        self, user_id: str, items: list[dict[str, Any]], *, message_type: int = 1, group_id: str = ""
    ) -> dict[str, Any]:
        """Queue one inbound message (as the server would deliver it); returns its payload."""
        seq = len(self._log) + 1
        token = f"ctx-{secrets.token_hex(6)}"
        if message_type == 1:
            self._context.setdefault(user_id, []).append(token)
        payload: dict[str, Any] = {
            "seq": seq,
            "message_id": MESSAGE_ID_BASE + seq,
            "from_user_id": user_id,
            "to_user_id": self.bot_id,
            "client_id": f"wx-{seq}",
            "create_time_ms": BASE_TIME_MS + seq * 1000,
            "update_time_ms": BASE_TIME_MS + seq * 1000,
            "session_id": f"session-{user_id}",
            "message_type": message_type,
            "message_state": 2,
            "item_list": items,
            "context_token": token,
        }
        if group_id:
            payload["group_id"] = group_id
        self._log.append(_Inbound(seq, user_id, payload))
        self._wake()
        return payload

    def inject_text(self, user_id: str, text: str) -> dict[str, Any]:
        return self.inject(user_id, [{"type": 1, "text_item": {"text": text}}])

    def inject_voice(self, user_id: str, transcript: str | None) -> dict[str, Any]:
        voice: dict[str, Any] = {"encode_type": 6, "playtime": 2300, "media": {"encrypt_query_param": "v"}}
        if transcript is not None:
            voice["text"] = transcript
        return self.inject(user_id, [{"type": 3, "voice_item": voice}])

    def inject_image(self, user_id: str, data: bytes | None = None, *, text: str = "") -> dict[str, Any]:
        """An image item; with `data`, its bytes are on the CDN, encrypted as WeChat does (the key
        given as base64 of its hex, the form real clients send)."""
        if data is None:
            return self.inject(user_id, [{"type": 2, "image_item": {"media": {"encrypt_query_param": "i"}}}])
        media = self._upload(data)
        items: list[dict[str, Any]] = [{"type": 2, "image_item": {"media": media, "mid_size": len(data)}}]
        if text:
            items.insert(0, {"type": 1, "text_item": {"text": text}})
        return self.inject(user_id, items)

    def inject_file(self, user_id: str, name: str = "report.pdf", data: bytes | None = None) -> dict[str, Any]:
        size = len(data) if data is not None else 1024
        item: dict[str, Any] = {"file_name": name, "len": str(size)}
        if data is not None:
            item["media"] = self._upload(data)
        return self.inject(user_id, [{"type": 4, "file_item": item}])

    def _upload(self, data: bytes) -> dict[str, Any]:
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        key = os.urandom(16)
        padder = padding.PKCS7(128).padder()
        padded = padder.update(data) + padder.finalize()
        encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        param = f"dl-{secrets.token_hex(8)}"
        self.cdn[param] = encryptor.update(padded) + encryptor.finalize()
        return {"encrypt_query_param": param, "aes_key": base64.b64encode(key.hex().encode()).decode(), "encrypt_type": 1}

    async def _cdn_download(self, request: web.Request) -> web.StreamResponse:
        param = request.query.get("encrypted_query_param", "")
        if param not in self.cdn:
            return web.Response(status=404)
        self.cdn_downloads.append(param)
        return web.Response(body=self.cdn[param], content_type="application/octet-stream")

    @property
    def cdn_base_url(self) -> str:
        return f"{self.base_url}/c2c"

    def inject_video(self, user_id: str) -> dict[str, Any]:
        return self.inject(user_id, [{"type": 5, "video_item": {"video_size": 2048}}])

    def context_token(self, user_id: str) -> str | None:
        """The token that came with this user's latest message."""
        tokens = self._context.get(user_id)
        return tokens[-1] if tokens else None

    def expire_context(self, user_id: str) -> None:
        """The user's reply window closes: every token issued so far stops working."""
        self._context[user_id] = []

    def expire_session(self) -> None:
        """The current bot token dies: getupdates answers errcode -14 until a new QR login."""
        self._expired_tokens.add(self.token)
        self._wake()

    def fail_send_next(self, ret: int = -2) -> None:
        """The next sendmessage answers with this ret and delivers nothing."""
        self._fail_send.append(ret)

    def fail_http_next(self, endpoint: str, status: int = 500, times: int = 1, *, retry_after: str | None = None) -> None:
        """The next `times` calls to `endpoint` (e.g. "getupdates") answer this HTTP status,
        with a Retry-After header when `retry_after` is given (429 / 503 throttling)."""
        self._fail_http.setdefault(endpoint, deque()).extend([(status, retry_after)] * times)

    @property
    def getupdates_calls(self) -> int:
        return self.calls["getupdates"]

    def duplicates(self) -> list[int]:
        """Seqs handed out again after the client had acknowledged them (it lost its cursor).

        Messages are acknowledged only by the cursor the client sends back, so an answer lost on
        the way (a poll cancelled at shutdown) is legitimately handed out again: not counted.
        """
        return sorted(self.redeliveries)

    def unacknowledged(self) -> list[int]:
        """Seqs of injected messages the client has not acknowledged with its cursor yet."""
        return [m.seq for m in self._log if m.seq > self.acked_seq]

    @property
    def injected(self) -> int:
        return len(self._log)

    def texts_to(self, user_id: str) -> list[str]:
        return [m.text for m in self.sent if m.to_user_id == user_id]

    async def wait_for_sent(self, n: int, timeout: float = 5.0) -> list[SentMessage]:
        """Wait until at least `n` messages were sent; TimeoutError says how many came."""
        await self._wait(lambda: len(self.sent) >= n, timeout, lambda: f"{len(self.sent)} of {n} messages sent")
        return self.sent

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
        """Wait until `predicate()` holds, checking after every request the server answers."""
        await self._wait(predicate, timeout, lambda: what)

    async def _wait(self, predicate: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"fake iLink: timed out waiting: {what()}")
            event = self._sent_event
            try:
                await asyncio.wait_for(event.wait(), min(remaining, 0.05))
            except TimeoutError:
                pass

    # -- middleware: count, inject HTTP failures, check headers ----------------------------------

    @web.middleware
    async def _count(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        if request.path == CDN_PATH:  # the CDN is another host in WeChat: no bot headers
            return await handler(request)
        endpoint = request.path.removeprefix(BOT_PATH)
        self.calls[endpoint] += 1
        try:
            failures = self._fail_http.get(endpoint)
            if failures:
                status, retry_after = failures.popleft()
                headers = {"Retry-After": retry_after} if retry_after is not None else None
                return web.json_response({"ret": -1, "errmsg": "injected failure"}, status=status, headers=headers)
            problems = self._check_headers(request, endpoint)
            if problems:
                self.header_errors.extend(f"{endpoint}: {p}" for p in problems)
                return web.json_response({"ret": -1, "errcode": -1, "errmsg": "; ".join(problems)}, status=401)
            if endpoint in SESSION_ENDPOINTS and self._bearer(request) in self._expired_tokens:
                # A dead login refuses every call, not only getupdates: a send cannot succeed either.
                self.expired_calls[endpoint] += 1
                return web.json_response({"ret": -14, "errcode": -14, "errmsg": "session timeout"})
            return await handler(request)
        finally:
            self._notify_progress()

    def _check_headers(self, request: web.Request, endpoint: str) -> list[str]:
        h = request.headers
        problems: list[str] = []
        if h.get("iLink-App-Id") != self.app_id:
            problems.append(f"iLink-App-Id is {h.get('iLink-App-Id')!r}")
        version = h.get("iLink-App-ClientVersion", "")
        if not _DIGITS.fullmatch(version) or int(version) >= 2**32:
            problems.append(f"iLink-App-ClientVersion is {version!r}, not a decimal uint32")
        if endpoint == "get_qrcode_status":
            if request.method != "GET":
                problems.append("get_qrcode_status must be a GET")
            return problems
        if request.method != "POST":
            problems.append(f"{endpoint} must be a POST")
        if not h.get("Content-Type", "").startswith("application/json"):
            problems.append(f"Content-Type is {h.get('Content-Type')!r}")
        if h.get("AuthorizationType") != "ilink_bot_token":
            problems.append(f"AuthorizationType is {h.get('AuthorizationType')!r}")
        problems.extend(self._check_uin(h.get("X-WECHAT-UIN")))
        if endpoint in BOT_ENDPOINTS:
            auth = h.get("Authorization", "")
            if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in self._tokens:
                problems.append("Authorization is not Bearer <a token this server issued>")
        return problems

    def _check_uin(self, uin: str | None) -> list[str]:
        if not uin:
            return ["X-WECHAT-UIN is missing"]
        try:
            decimal = base64.b64decode(uin, validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return ["X-WECHAT-UIN is not base64 of ASCII"]
        if not _DIGITS.fullmatch(decimal) or int(decimal) >= 2**32:
            return ["X-WECHAT-UIN is not base64 of a decimal uint32"]
        if self.uins and self.uins[-1] == uin:
            return ["X-WECHAT-UIN repeats the previous request's (must be fresh per request)"]
        self.uins.append(uin)
        return []

    async def _body(self, request: web.Request, endpoint: str, *, base_info: bool = True) -> dict[str, Any] | None:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            self.protocol_errors.append(f"{endpoint}: body is not JSON")
            return None
        if not isinstance(body, dict):
            self.protocol_errors.append(f"{endpoint}: body is not an object")
            return None
        if base_info:
            info = body.get("base_info")
            if not isinstance(info, dict) or not isinstance(info.get("channel_version"), str) or not info["channel_version"]:
                self.protocol_errors.append(f"{endpoint}: base_info.channel_version missing")
                return None
        return body

    def _bearer(self, request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ")

    # -- QR login -------------------------------------------------------------------------------

    async def _get_bot_qrcode(self, request: web.Request) -> web.Response:
        body = await self._body(request, "get_bot_qrcode", base_info=False)
        if request.query.get("bot_type") != "3":
            self.protocol_errors.append(f"get_bot_qrcode: bot_type is {request.query.get('bot_type')!r}")
        tokens = body.get("local_token_list") if body else None
        if not isinstance(tokens, list):
            self.protocol_errors.append("get_bot_qrcode: local_token_list missing")
            tokens = []
        self.qr_local_tokens.append(tokens)
        self._qr_count += 1
        self._qr_current = f"qr-{self._qr_count}-{secrets.token_hex(4)}"
        self._redirect_host = None
        content = f"https://liteapp.weixin.qq.com/q/7GiQu1?qrcode={self._qr_current}&bot_type=3"
        return web.json_response({"ret": 0, "qrcode": self._qr_current, "qrcode_img_content": content})

    async def _get_qrcode_status(self, request: web.Request) -> web.Response:
        qrcode = request.query.get("qrcode", "")
        code = request.query.get("verify_code")
        self.qr_polls.append((qrcode, code, request.host))
        if qrcode != self._qr_current:
            self.protocol_errors.append("get_qrcode_status: polled a code that is not the current one")
            return web.json_response({"status": "expired"})
        if self._redirect_host and request.host != self._redirect_host:
            self.protocol_errors.append("get_qrcode_status: ignored scaned_but_redirect")
        if self._awaiting_code:
            if code != self.verify_code:
                return web.json_response({"status": "need_verifycode"})
            self._awaiting_code = False
        status = self._qr_script.popleft() if self._qr_script else "wait"
        answer: dict[str, Any] = {"status": status}
        if status == "need_verifycode":
            self._awaiting_code = True
        elif status == "scaned_but_redirect":
            # Same server under another name, so the fake can tell the client really moved.
            self._redirect_host = f"localhost:{self.port}"
            answer["redirect_host"] = self._redirect_host
        elif status == "confirmed":
            self.token = self._new_token()
            self._tokens.add(self.token)
            answer.update(self.credentials_json())
        return web.json_response(answer)

    # -- bot API --------------------------------------------------------------------------------

    async def _getupdates(self, request: web.Request) -> web.Response:
        body = await self._body(request, "getupdates")
        if body is None:
            return web.json_response({"ret": -1, "errmsg": "bad request"})
        token = self._bearer(request)
        buf = body.get("get_updates_buf")
        if not isinstance(buf, str):
            self.protocol_errors.append("getupdates: get_updates_buf missing")
            buf = ""
        ack = self._ack_of(buf)
        # A cursor older than one the client already sent back: it lost (or never saved) it.
        went_back_to = self.acked_seq if ack < self.acked_seq else None
        self.acked_seq = max(self.acked_seq, ack)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.longpoll_ms / 1000
        while True:
            if token in self._expired_tokens:
                return web.json_response({"errcode": -14, "errmsg": "session timeout"})
            pending = [m for m in self._log if m.seq > ack]
            remaining = deadline - loop.time()
            if pending or remaining <= 0 or self._closing:
                break
            wakeup = self._wakeup
            try:
                await asyncio.wait_for(wakeup.wait(), remaining)
            except TimeoutError:
                pass
        batch = pending[: self.batch_limit]
        for m in batch:
            self.deliveries[m.seq] += 1
            if went_back_to is not None and m.seq <= went_back_to:
                self.redeliveries[m.seq] += 1
        new_ack = batch[-1].seq if batch else ack
        return web.json_response(
            {
                "ret": 0,
                "msgs": [m.payload for m in batch],
                "get_updates_buf": self._issue_buf(new_ack),
                "longpolling_timeout_ms": self.longpoll_ms,
            }
        )

    async def _sendmessage(self, request: web.Request) -> web.Response:
        body = await self._body(request, "sendmessage")
        msg = body.get("msg") if body else None
        if not isinstance(msg, dict):
            self.protocol_errors.append("sendmessage: msg missing")
            return web.json_response({"ret": -1, "errmsg": "msg missing"})
        to, token, client_id = msg.get("to_user_id"), msg.get("context_token"), msg.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            self.protocol_errors.append("sendmessage: client_id missing")
        elif client_id in self._client_ids:
            return web.json_response({"ret": 0})  # a retry of a delivered message: idempotent
        if msg.get("message_type") != 2 or msg.get("message_state") != 2:
            self.protocol_errors.append("sendmessage: not a finished bot message")
        items = msg.get("item_list")
        text = None
        if isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict) and items[0].get("type") == 1:
            text = (items[0].get("text_item") or {}).get("text")
        if not isinstance(text, str) or not text:
            self.protocol_errors.append("sendmessage: item_list is not one text item")
            return web.json_response({"ret": -1, "errmsg": "bad item_list"})
        if len(text) > 4000:
            self.protocol_errors.append(f"sendmessage: text of {len(text)} characters")
        if self._fail_send:
            return web.json_response({"ret": self._fail_send.popleft(), "errmsg": "injected failure"})
        if not isinstance(to, str) or token not in self._context.get(to, []):
            return web.json_response({"ret": -2, "errmsg": "context token invalid or expired"})
        self._client_ids.add(client_id)
        self.sent.append(SentMessage(to, text, token, client_id))
        return web.json_response({"ret": 0})

    async def _getconfig(self, request: web.Request) -> web.Response:
        body = await self._body(request, "getconfig")
        user = body.get("ilink_user_id") if body else None
        if not isinstance(user, str) or not user:
            self.protocol_errors.append("getconfig: ilink_user_id missing")
            return web.json_response({"ret": -1, "errmsg": "ilink_user_id missing"})
        token = body.get("context_token") if body else None
        if token is not None and token not in self._context.get(user, []):
            self.protocol_errors.append("getconfig: context_token is not this user's")
        ticket = self._tickets.setdefault(user, base64.b64encode(secrets.token_bytes(12)).decode())
        return web.json_response({"ret": 0, "typing_ticket": ticket})

    async def _sendtyping(self, request: web.Request) -> web.Response:
        body = await self._body(request, "sendtyping")
        if body is None:
            return web.json_response({"ret": -1})
        user, ticket, status = body.get("ilink_user_id"), body.get("typing_ticket"), body.get("status")
        if not isinstance(user, str) or ticket != self._tickets.get(user) or status not in (1, 2):
            self.protocol_errors.append("sendtyping: wrong user, ticket or status")
            return web.json_response({"ret": -1, "errmsg": "bad typing request"})
        self.typing.append(TypingCall(user, status))
        return web.json_response({"ret": 0})

    async def _notify(self, request: web.Request) -> web.Response:
        await self._body(request, request.path.removeprefix(BOT_PATH))
        return web.json_response({"ret": 0})

    # -- helpers --------------------------------------------------------------------------------

    def _issue_buf(self, ack: int) -> str:
        buf = base64.b64encode(f"ack={ack};{secrets.token_hex(8)}".encode()).decode()
        self._bufs[buf] = ack
        return buf

    def _ack_of(self, buf: str) -> int:
        if not buf:
            return 0
        if buf not in self._bufs:
            self.protocol_errors.append("getupdates: a get_updates_buf this server never issued")
            return 0
        return self._bufs[buf]

    def _wake(self) -> None:
        event, self._wakeup = self._wakeup, asyncio.Event()
        event.set()

    def _notify_progress(self) -> None:
        event, self._sent_event = self._sent_event, asyncio.Event()
        event.set()

    @staticmethod
    def _new_token() -> str:
        return f"{secrets.token_hex(8)}@im.bot:{secrets.token_hex(16)}"


# -- load check ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadResult:
    expected: dict[str, list[str]]  # per user, the echoes in the order the user wrote
    delivered: dict[str, list[str]]  # per user, what the fake received, in order
    failures: list[str]  # sends that raised


async def echo_load(fake: FakeIlink, adapter: Any, *, users: int = 20, per_user: int = 10, timeout: float = 30.0) -> LoadResult:
    """Drive `users` x `per_user` messages through a started-here adapter with an echo gateway.

    The echo gateway queues per chat (like the real one) and answers "echo: <text>". Messages are
    injected round-robin so batches mix users. The adapter is started and stopped here.
    """
    from bot.message import Message, Reply

    queues: dict[str, asyncio.Queue[Message]] = {}
    workers: list[asyncio.Task[None]] = []
    failures: list[str] = []

    async def worker(queue: asyncio.Queue[Message]) -> None:
        while True:
            message = await queue.get()
            try:
                await adapter.send(Reply(channel=message.channel, chat_id=message.chat_id, text=f"echo: {message.text}"))
            except Exception as exc:  # recorded for the test to report, not raised into the void
                failures.append(f"{message.chat_id}: {exc!r}")
            queue.task_done()

    async def inbound(message: Message) -> None:
        queue = queues.get(message.chat_id)
        if queue is None:
            queue = queues[message.chat_id] = asyncio.Queue()
            workers.append(asyncio.create_task(worker(queue)))
        queue.put_nowait(message)

    names = [f"user{u:02d}@im.wechat" for u in range(users)]
    expected = {name: [f"echo: {name} #{i}" for i in range(per_user)] for name in names}
    await adapter.start(inbound)
    try:
        for i in range(per_user):
            for name in names:
                fake.inject_text(name, f"{name} #{i}")
            await asyncio.sleep(0)
        await fake.wait_for(
            lambda: len(fake.sent) + len(failures) >= users * per_user, timeout, "every echo sent or failed"
        )
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await adapter.stop()
    return LoadResult(expected, {name: fake.texts_to(name) for name in names}, failures)
