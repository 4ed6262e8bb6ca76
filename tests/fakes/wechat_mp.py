"""Fakes for the Official Account channel: a client that plays WeChat's callback side, and the API server.

`WechatClient` signs (and in safe mode encrypts) a push, posts it to the adapter with WeChat's
5 s timeout, retries on timeout or connection failure, and opens and checks the passive reply.
`FakeMpApi` serves `cgi-bin/token` and `cgi-bin/message/custom/send` on 127.0.0.1, and can
script refusals (errcodes) and throttling (HTTP 429/503 with a Retry-After header).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from defusedxml.ElementTree import fromstring

from adapters.wechat.mp.crypto import Envelope, aes_key_from_encoding, open_envelope, seal, sha1_signature
from adapters.wechat.mp.xml_codec import cdata

__all__ = ["CallbackResult", "FakeMpApi", "PassiveReply", "SentMessage", "WechatClient", "make_aes_key"]

ACCOUNT_ID = "gh_fake_account"


def make_aes_key() -> str:
    """A random valid EncodingAESKey (43 base64 characters)."""
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class PassiveReply:
    """A passive text reply, opened (and in safe mode decrypted and verified)."""

    to_user: str
    from_user: str
    msg_type: str
    content: str


@dataclass(frozen=True)
class CallbackResult:
    """What the last attempt of a push got back."""

    status: int
    body: str
    attempts: int
    reply: PassiveReply | None = None


class WechatClient:
    """Plays WeChat's servers against a callback URL.

    `retries` re-sends after a timeout or connection failure (WeChat: 3 at 5 s); `retry_interval`
    is the pause before each, configurable so tests need not wait 5 s. WeChat documents that a
    retry repeats the push (same MsgId and body), not whether it repeats the query: by default
    each attempt is signed afresh, `resign_retries=False` repeats the first query exactly, and
    the adapter must deliver the reply either way. `timeout` is when WeChat gives up on an
    attempt and drops the connection.
    """

    def __init__(
        self,
        url: str,
        token: str,
        app_id: str,
        aes_key: str | None = None,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        retry_interval: float = 5.0,
        resign_retries: bool = True,
    ) -> None:
        self.url = url
        self.token = token
        self.app_id = app_id
        self.aes_key = aes_key
        self._key = aes_key_from_encoding(aes_key) if aes_key else None
        self.timeout = timeout
        self.retries = retries
        self.retry_interval = retry_interval
        self.resign_retries = resign_retries
        self.captured: list[tuple[dict[str, str], bytes]] = []  # every POST's query and body, in order
        self.attempts_started = 0  # every POST made, over all pushes
        self._attempt_event = asyncio.Event()
        self._msg_ids = itertools.count(10_000_000_000)

    # -- building pushes -------------------------------------------------------------------------

    def text_xml(self, openid: str, content: str, *, msg_id: str | None = None, create_time: int | None = None) -> str:
        """A text push from openid to the account."""
        mid = msg_id or str(next(self._msg_ids))
        return self._xml(openid, create_time, "text", f"<Content>{cdata(content)}</Content><MsgId>{mid}</MsgId>")

    def event_xml(self, openid: str, event: str, *, create_time: int | None = None) -> str:
        """An event push (subscribe, unsubscribe, CLICK...)."""
        return self._xml(openid, create_time, "event", f"<Event>{cdata(event)}</Event>")

    def media_xml(self, openid: str, msg_type: str, extra: str = "", *, msg_id: str | None = None) -> str:
        """A non-text push (image, voice, video, location, link) with raw extra fields."""
        mid = msg_id or str(next(self._msg_ids))
        return self._xml(openid, None, msg_type, f"{extra}<MsgId>{mid}</MsgId>")

    def _xml(self, openid: str, create_time: int | None, msg_type: str, rest: str) -> str:
        ct = int(time.time()) if create_time is None else create_time
        return (
            f"<xml><ToUserName>{cdata(ACCOUNT_ID)}</ToUserName><FromUserName>{cdata(openid)}</FromUserName>"
            f"<CreateTime>{ct}</CreateTime><MsgType>{cdata(msg_type)}</MsgType>{rest}</xml>"
        )

    # -- sending ---------------------------------------------------------------------------------

    async def verify_url(self, echostr: str, *, forge: bool = False) -> tuple[int, str]:
        """The GET URL verification; `forge` signs with a wrong token."""
        timestamp, nonce = str(int(time.time())), str(secrets.randbelow(10**9))
        token = "forged" + self.token if forge else self.token
        params = {"signature": sha1_signature(token, timestamp, nonce), "timestamp": timestamp, "nonce": nonce, "echostr": echostr}
        async with aiohttp.ClientSession() as session:
            async with session.get(self.url, params=params, timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                return resp.status, await resp.text()

    async def push(
        self,
        xml: str,
        *,
        forge: bool = False,
        timestamp: int | None = None,
        raw_body: bytes | None = None,
    ) -> CallbackResult:
        """Sign (encrypt in safe mode) and post xml, retrying like WeChat; open the passive reply.

        `forge` signs with a wrong token; `timestamp` overrides the signed time (replay tests);
        `raw_body` is posted as is: in plain mode the signature does not cover the body; in safe
        mode it stands for the outer envelope (msg_signature is then over an empty Encrypt).
        Each retry is signed afresh (new timestamp and nonce) unless `resign_retries` is False.
        """
        fixed = self._sign(xml, forge=forge, timestamp=timestamp, raw_body=raw_body)

        def attempt(number: int) -> tuple[dict[str, str], bytes]:
            if number == 1 or not self.resign_retries:
                return fixed
            return self._sign(xml, forge=forge, timestamp=timestamp, raw_body=raw_body)

        return await self._post(attempt)

    def _sign(
        self, xml: str, *, forge: bool, timestamp: int | None, raw_body: bytes | None
    ) -> tuple[dict[str, str], bytes]:
        """The query and body of one POST, as WeChat builds them."""
        ts = str(int(time.time()) if timestamp is None else timestamp)
        nonce = str(secrets.randbelow(10**9))
        token = "forged" + self.token if forge else self.token
        params = {"timestamp": ts, "nonce": nonce, "signature": sha1_signature(token, ts, nonce), "openid": "o"}
        if self._key is not None and raw_body is None:
            envelope = seal(xml, token=token, app_id=self.app_id, key=self._key, timestamp=ts, nonce=nonce)
            params |= {"encrypt_type": "aes", "msg_signature": envelope.msg_signature}
            body = (
                f"<xml><ToUserName>{cdata(ACCOUNT_ID)}</ToUserName><Encrypt>{cdata(envelope.encrypt)}</Encrypt></xml>"
            ).encode()
        else:
            if self._key is not None:
                params |= {"encrypt_type": "aes", "msg_signature": sha1_signature(token, ts, nonce, "")}
            body = raw_body if raw_body is not None else xml.encode("utf-8")
        return params, body

    async def post_raw(self, params: dict[str, str], body: bytes) -> CallbackResult:
        """Post a query and body as given, once (an attacker replaying or editing a captured callback)."""
        return await self._post(lambda number: (params, body), retries=0)

    async def _post(
        self, attempt: Callable[[int], tuple[dict[str, str], bytes]], *, retries: int | None = None
    ) -> CallbackResult:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        retries = self.retries if retries is None else retries
        attempts = 0
        async with aiohttp.ClientSession() as session:
            while True:
                attempts += 1
                self.attempts_started += 1
                self._attempt_event.set()
                params, body = attempt(attempts)
                self.captured.append((dict(params), body))
                try:
                    async with session.post(self.url, params=params, data=body, timeout=timeout) as resp:
                        text = await resp.text()
                        if resp.status < 500 or attempts > retries:
                            return CallbackResult(resp.status, text, attempts, self._open_reply(resp.status, text))
                except (TimeoutError, aiohttp.ClientConnectionError):
                    if attempts > retries:
                        raise
                await asyncio.sleep(self.retry_interval)

    async def wait_attempts(self, count: int) -> None:
        """Return once `count` POSTs in all have been started (used to act between retries)."""
        while self.attempts_started < count:
            self._attempt_event.clear()
            await self._attempt_event.wait()

    def _open_reply(self, status: int, text: str) -> PassiveReply | None:
        """Parse (and in safe mode verify + decrypt) a passive reply; None for "success" or an error."""
        if status != 200 or not text.strip() or text.strip() == "success":
            return None
        fields = {child.tag: child.text or "" for child in fromstring(text.encode("utf-8"), forbid_dtd=True)}
        # A reply in clear to a safe-mode account is read as such (the finding it would show).
        if self._key is not None and "Encrypt" in fields:
            envelope = Envelope(fields["Encrypt"], fields["MsgSignature"], fields["TimeStamp"], fields["Nonce"])
            # Raises WechatCryptoError if the adapter signed or encrypted it wrongly.
            inner = open_envelope(envelope, token=self.token, app_id=self.app_id, key=self._key)
            fields = {child.tag: child.text or "" for child in fromstring(inner.encode("utf-8"), forbid_dtd=True)}
        return PassiveReply(fields["ToUserName"], fields["FromUserName"], fields["MsgType"], fields.get("Content", ""))


@dataclass(frozen=True)
class SentMessage:
    """One customer-service message the fake API accepted."""

    touser: str
    content: str


@dataclass
class _State:
    tokens: dict[str, bool] = field(default_factory=dict)  # token -> still valid
    sent: list[SentMessage] = field(default_factory=list)
    token_requests: int = 0
    send_requests: int = 0
    fail_next: list[int] = field(default_factory=list)
    throttle_next: list[tuple[int, str | None]] = field(default_factory=list)  # (HTTP status, Retry-After)


class FakeMpApi:
    """The WeChat API server for `cgi-bin/token` and `cgi-bin/message/custom/send`; `async with` it."""

    def __init__(self, app_id: str, app_secret: str, *, expires_in: int = 7200) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.expires_in = expires_in
        self._state = _State()
        self._runner: web.AppRunner | None = None
        self.base = ""
        self._serial = itertools.count(1)
        # Pictures followers sent, served at <base>/mmbiz/<name> (WeChat's image host, PicUrl).
        self.pictures: dict[str, bytes] = {}
        self.picture_fetches: list[str] = []
        # Temporary media by MediaId (cgi-bin/media/get): (bytes, content type).
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_fetches: list[str] = []

    @property
    def sent(self) -> list[SentMessage]:
        return self._state.sent

    @property
    def token_requests(self) -> int:
        return self._state.token_requests

    @property
    def send_requests(self) -> int:
        return self._state.send_requests

    @property
    def issued_tokens(self) -> list[str]:
        """Every access token handed out, oldest first."""
        return list(self._state.tokens)

    def expire_tokens(self) -> None:
        """Every issued token is now expired (send answers 42001)."""
        for token in self._state.tokens:
            self._state.tokens[token] = False

    def fail_next(self, errcode: int) -> None:
        """The next send answers this errcode (40001/42001 also invalidate the token used)."""
        self._state.fail_next.append(errcode)

    def throttle_next(self, status: int = 429, retry_after: str | None = "1", *, times: int = 1) -> None:
        """The next `times` sends answer this HTTP status with this Retry-After header (None: no header)."""
        self._state.throttle_next.extend([(status, retry_after)] * times)

    async def __aenter__(self) -> FakeMpApi:
        app = web.Application()
        app.router.add_get("/cgi-bin/token", self._token)
        app.router.add_post("/cgi-bin/message/custom/send", self._send)
        app.router.add_get("/mmbiz/{name}", self._picture)
        app.router.add_get("/cgi-bin/media/get", self._media_get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def picture_url(self, name: str, data: bytes) -> str:
        """Host a follower's picture; the PicUrl an image push carries."""
        self.pictures[name] = data
        return f"{self.base}/mmbiz/{name}"

    async def _picture(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.pictures:
            return web.Response(status=404)
        self.picture_fetches.append(name)
        return web.Response(body=self.pictures[name], content_type="image/jpeg")

    async def _media_get(self, request: web.Request) -> web.Response:
        """media/get: the bytes, or a JSON errcode like WeChat (a bad token, an unknown id)."""
        token = request.query.get("access_token", "")
        if not self._state.tokens.get(token):
            return web.json_response({"errcode": 40001, "errmsg": "invalid credential"})
        media_id = request.query.get("media_id", "")
        if media_id not in self.media:
            return web.json_response({"errcode": 40007, "errmsg": "invalid media_id"})
        self.media_fetches.append(media_id)
        data, content_type = self.media[media_id]
        return web.Response(body=data, content_type=content_type)

    async def _token(self, request: web.Request) -> web.Response:
        self._state.token_requests += 1
        q = request.query
        if q.get("grant_type") != "client_credential":
            return web.json_response({"errcode": 40002, "errmsg": "invalid grant_type"})
        if q.get("appid") != self.app_id:
            return web.json_response({"errcode": 40013, "errmsg": "invalid appid"})
        if q.get("secret") != self.app_secret:
            return web.json_response({"errcode": 40125, "errmsg": "invalid appsecret"})
        token = f"TOKEN-{next(self._serial)}-{secrets.token_hex(4)}"
        self._state.tokens[token] = True
        return web.json_response({"access_token": token, "expires_in": self.expires_in})

    async def _send(self, request: web.Request) -> web.Response:
        self._state.send_requests += 1
        if self._state.throttle_next:
            status, retry_after = self._state.throttle_next.pop(0)
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return web.Response(status=status, headers=headers, text="slow down")
        token = request.query.get("access_token", "")
        if token not in self._state.tokens:
            return web.json_response({"errcode": 40001, "errmsg": "invalid credential"})
        if not self._state.tokens[token]:
            return web.json_response({"errcode": 42001, "errmsg": "access_token expired"})
        if self._state.fail_next:
            errcode = self._state.fail_next.pop(0)
            if errcode in (40001, 42001):
                self._state.tokens[token] = False
            return web.json_response({"errcode": errcode, "errmsg": "scripted failure"})
        try:
            data = json.loads(await request.text())
            assert data["msgtype"] == "text"
            touser, content = data["touser"], data["text"]["content"]
        except (ValueError, KeyError, TypeError, AssertionError):
            return web.json_response({"errcode": 44002, "errmsg": "bad body"})
        self._state.sent.append(SentMessage(touser, content))
        return web.json_response({"errcode": 0, "errmsg": "ok"})

