"""WeChat QR login over iLink: show the code, poll its status, store the bot credentials.

`login()` is what `memgate wechat login` runs. The credentials land in
`<data_dir>/wechat_credentials.json` with mode 600; a running WechatIlinkAdapter notices the new
file and resumes by itself.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from adapters.wechat.ilink import protocol as proto
from adapters.wechat.ilink.protocol import Credentials, QrCode, QrStatus
from adapters.wechat.ilink.state import load_credentials, save_credentials
from bot.errors import ChannelError

log = logging.getLogger(__name__)

QR_IMAGE_STEM = "wechat_login_qr"
# The status request is a long poll on the server side; give it room before calling it "wait".
STATUS_TIMEOUT_S = 40.0
REQUEST_TIMEOUT_S = 15.0
MAX_QR_CODES = 3  # a code that expires is replaced, at most this many codes in one login

Out = Callable[[str], Any]
AskCode = Callable[[str], Awaitable[str]]


def render_qr_text(content: str) -> str:
    """The QR code for `content` as terminal text (qrcode's half-block ASCII art)."""
    import qrcode

    qr = qrcode.QRCode(border=2)
    qr.add_data(content)
    qr.make(fit=True)
    buf = io.StringIO()
    qr.print_ascii(out=buf, invert=True)
    return buf.getvalue()


def save_qr_image(content: str, data_dir: Path) -> Path:
    """Save the QR code as a PNG (pillow, else pypng), or as an SVG when neither is installed."""
    import qrcode

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    qr = qrcode.QRCode(border=4, box_size=8)
    qr.add_data(content)
    qr.make(fit=True)
    factory: Any
    if _importable("PIL"):
        from qrcode.image.pil import PilImage as factory
        path = data_dir / f"{QR_IMAGE_STEM}.png"
    elif _importable("png"):
        from qrcode.image.pure import PyPNGImage as factory
        path = data_dir / f"{QR_IMAGE_STEM}.png"
    else:
        from qrcode.image.svg import SvgPathImage as factory
        path = data_dir / f"{QR_IMAGE_STEM}.svg"
    image = qr.make_image(image_factory=factory)
    with open(path, "wb") as fh:
        image.save(fh)
    return path


async def login(
    base_url: str,
    data_dir: Path,
    *,
    out: Out = print,
    session: aiohttp.ClientSession | None = None,
    poll_interval: float = 1.0,
    timeout: float = 480,
    ask_code: AskCode | None = None,
    app_id: str = proto.DEFAULT_APP_ID,
    client_version: str = proto.DEFAULT_CLIENT_VERSION,
) -> Credentials:
    """Log the bot in by QR code and store its credentials in `data_dir` (mode 600).

    Walks wait -> scaned -> confirmed; an expired code is replaced (up to 3 codes); a
    scaned_but_redirect moves polling to the given host; need_verifycode asks for the number
    WeChat shows on the phone (`ask_code`, default: read it from the terminal);
    binded_redirect keeps the credentials already stored. Raises ChannelError on timeout or
    when the login cannot finish.
    """
    own = session is None
    http = session or aiohttp.ClientSession()
    try:
        flow = _LoginFlow(http, base_url, Path(data_dir), out, ask_code or _ask_terminal, app_id, client_version)
        return await asyncio.wait_for(flow.run(poll_interval), timeout)
    except TimeoutError:
        raise ChannelError(f"WeChat login timed out after {timeout:.0f} s; run `memgate wechat login` again") from None
    finally:
        if own:
            await http.close()


class _LoginFlow:
    """One QR login: fetch a code, show it, poll its status until a final answer."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        base_url: str,
        data_dir: Path,
        out: Out,
        ask_code: AskCode,
        app_id: str,
        client_version: str,
    ) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.data_dir = data_dir
        self.out = out
        self.ask_code = ask_code
        self.app_id = app_id
        self.client_version = client_version
        self.previous = load_credentials(data_dir)

    async def run(self, poll_interval: float) -> Credentials:
        codes = 1
        qr = await self._new_code()
        poll_base = self.base_url
        verify_code: str | None = None
        scanned = False
        while True:
            status = await self._status(poll_base, qr, verify_code)
            log.debug("wechat login: status %s", status.status)
            if status.status == "confirmed":
                return self._confirmed(status)
            if status.status == "binded_redirect":
                return self._already_bound()
            if status.status == "scaned":
                verify_code = None
                if not scanned:
                    self.out("Scanned. Confirm the login in WeChat on your phone.")
                    scanned = True
            elif status.status == "need_verifycode":
                prompt = "Wrong code, try again: " if verify_code else "Enter the number WeChat shows on your phone: "
                verify_code = (await self.ask_code(prompt)).strip()
                continue
            elif status.status == "scaned_but_redirect":
                if status.redirect_host:
                    poll_base = _redirect_base(self.base_url, status.redirect_host)
                    log.info("wechat login: polling moved to %s", status.redirect_host)
            elif status.status in ("expired", "verify_code_blocked"):
                codes += 1
                if codes > MAX_QR_CODES:
                    raise ChannelError(f"WeChat QR code {status.status} {MAX_QR_CODES} times; run the login again")
                reason = "expired" if status.status == "expired" else "blocked after wrong codes"
                self.out(f"QR code {reason}; here is a new one ({codes}/{MAX_QR_CODES}).")
                qr, poll_base, verify_code, scanned = await self._new_code(), self.base_url, None, False
            await asyncio.sleep(poll_interval)

    async def _new_code(self) -> QrCode:
        url = f"{self.base_url}/{proto.GET_BOT_QRCODE}"
        tokens = [self.previous.bot_token] if self.previous else []
        headers = proto.post_headers(None, self.app_id, self.client_version, proto.random_uin())
        try:
            async with self.http.post(
                url,
                params={"bot_type": proto.BOT_TYPE},
                data=json.dumps({"local_token_list": tokens}).encode(),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            ) as resp:
                payload = await resp.json(content_type=None) if resp.status == 200 else None
                http_status = resp.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ChannelError(f"could not get a WeChat login QR code: {type(exc).__name__}") from exc
        qr = proto.parse_qrcode(payload)
        if qr is None:
            raise ChannelError(f"WeChat sent no login QR code (HTTP {http_status})")
        self._show(qr)
        return qr

    def _show(self, qr: QrCode) -> None:
        self.out("Scan this QR code with WeChat to log the bot in:")
        self.out(render_qr_text(qr.content))
        path = save_qr_image(qr.content, self.data_dir)
        if path.suffix == ".svg":
            self.out(f"QR code saved as SVG (install pillow or pypng for a PNG): {path}")
        else:
            self.out(f"QR code saved as PNG: {path}")
        self.out(f"If the code does not show, open this link in WeChat: {qr.content}")

    async def _status(self, poll_base: str, qr: QrCode, verify_code: str | None) -> QrStatus:
        params = {"qrcode": qr.qrcode}
        if verify_code:
            params["verify_code"] = verify_code
        headers = proto.app_headers(self.app_id, self.client_version)
        try:
            async with self.http.get(
                f"{poll_base}/{proto.GET_QRCODE_STATUS}",
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S),
            ) as resp:
                if resp.status != 200:
                    log.warning("wechat login: status poll answered HTTP %s; retrying", resp.status)
                    return QrStatus("wait")
                return proto.parse_qr_status(await resp.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            # The real client treats a gateway timeout or a dropped poll as "still waiting".
            log.warning("wechat login: status poll failed (%s); retrying", type(exc).__name__)
            return QrStatus("wait")

    def _confirmed(self, status: QrStatus) -> Credentials:
        if not status.bot_token or not status.ilink_bot_id:
            raise ChannelError("WeChat confirmed the login but sent no bot token or bot id")
        creds = Credentials(
            bot_token=status.bot_token,
            ilink_bot_id=status.ilink_bot_id,
            baseurl=status.baseurl or self.base_url,
            ilink_user_id=status.ilink_user_id,
        )
        path = save_credentials(self.data_dir, creds)
        self.out(f"Logged in as WeChat bot {creds.ilink_bot_id}. Credentials saved to {path}")
        log.info("wechat login: confirmed for bot %s", creds.ilink_bot_id)
        return creds

    def _already_bound(self) -> Credentials:
        if self.previous is None:
            raise ChannelError("WeChat says this bot is already bound, but no credentials are stored here")
        self.out("This WeChat account is already bound to this bot; keeping the stored credentials.")
        return self.previous


def _redirect_base(base_url: str, host: str) -> str:
    """The polling base after a redirect: the new host, with the scheme we were using."""
    scheme = urlsplit(base_url).scheme or "https"
    return f"{scheme}://{host.strip().rstrip('/')}"


async def _ask_terminal(prompt: str) -> str:
    return await asyncio.to_thread(input, prompt)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
