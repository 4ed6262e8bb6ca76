"""The WeChat iLink bot protocol as pure functions: headers, request bodies, response parsing.

iLink is the HTTP JSON API behind Tencent's openclaw-weixin channel. Every bot call is a POST of
JSON to `<base>/ilink/bot/<endpoint>` carrying `base_info`; QR login uses a POST for the code and
a GET for its status. Nothing here does I/O: the adapter and the login flow do that. Inbound
messages (getupdates answers -> Message) are inbound.py's.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import IntEnum
from typing import Any


DEFAULT_BASE_URL = "https://ilinkai.weixin.qq.com"
DEFAULT_APP_ID = "bot"
# The protocol version we speak; reported as base_info.channel_version and, encoded, as the
# iLink-App-ClientVersion header (the server may gate features on it).
DEFAULT_CLIENT_VERSION = "2.4.8"
BOT_TYPE = "3"

_DIGITS = re.compile(r"[0-9]+")
_INT = re.compile(r"-?[0-9]{1,20}")

GET_BOT_QRCODE = "ilink/bot/get_bot_qrcode"
GET_QRCODE_STATUS = "ilink/bot/get_qrcode_status"
GET_UPDATES = "ilink/bot/getupdates"
SEND_MESSAGE = "ilink/bot/sendmessage"
GET_CONFIG = "ilink/bot/getconfig"
SEND_TYPING = "ilink/bot/sendtyping"
NOTIFY_START = "ilink/bot/msg/notifystart"
NOTIFY_STOP = "ilink/bot/msg/notifystop"

# errcode (or ret) of a bot session the server no longer accepts: only a new QR login helps.
SESSION_EXPIRED = -14
# ret of sendmessage when the message was not delivered (no valid context_token: the user has
# not written within the reply window).
NOT_DELIVERED = -2


class ItemType(IntEnum):
    """`type` of one entry of a message's item_list."""

    TEXT = 1
    IMAGE = 2
    VOICE = 3
    FILE = 4
    VIDEO = 5


class MessageType(IntEnum):
    """Who wrote a message: a person, or a bot (our own sends come back with BOT)."""

    USER = 1
    BOT = 2


class MessageState(IntEnum):
    """Generation state; we only ever send finished messages."""

    NEW = 0
    GENERATING = 1
    FINISH = 2


class TypingStatus(IntEnum):
    """`status` of sendtyping."""

    TYPING = 1
    CANCEL = 2


# -- headers and bodies ----------------------------------------------------------------------


def client_version_number(version: str) -> int:
    """Encode "major.minor.patch" as the uint32 0x00MMNNPP the iLink-App-ClientVersion header wants.

    Missing or non-numeric parts count as 0; each part is masked to 8 bits.
    """
    parts = []
    for piece in (version.split(".") + ["0", "0", "0"])[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) & 0xFF if digits else 0)
    major, minor, patch = parts
    return (major << 16) | (minor << 8) | patch


def encode_uin(value: int) -> str:
    """X-WECHAT-UIN value: base64 of the decimal string of a uint32."""
    if not 0 <= value < 2**32:
        raise ValueError(f"uin must be a uint32, got {value}")
    return base64.b64encode(str(value).encode("ascii")).decode("ascii")


def decode_uin(header: str) -> int:
    """Inverse of encode_uin; raises ValueError on anything that is not one."""
    raw = base64.b64decode(header.encode("ascii"), validate=True).decode("ascii")
    if not _DIGITS.fullmatch(raw) or (len(raw) > 1 and raw.startswith("0")):
        raise ValueError("X-WECHAT-UIN is not a decimal uint32")
    value = int(raw)
    if value >= 2**32:
        raise ValueError("X-WECHAT-UIN is out of the uint32 range")
    return value


def random_uin() -> str:
    """A fresh X-WECHAT-UIN (the server expects a new random one per request)."""
    return encode_uin(secrets.randbits(32))


def app_headers(app_id: str, client_version: str) -> dict[str, str]:
    """Headers every iLink request carries, the unauthenticated QR status GET included."""
    return {
        "iLink-App-Id": app_id,
        "iLink-App-ClientVersion": str(client_version_number(client_version)),
    }


def post_headers(token: str | None, app_id: str, client_version: str, uin: str) -> dict[str, str]:
    """Headers of a JSON POST; `token` is None only for the QR code request (no bot yet)."""
    headers = {
        "Content-Type": "application/json",
        "AuthorizationType": "ilink_bot_token",
        "X-WECHAT-UIN": uin,
        **app_headers(app_id, client_version),
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def base_info(channel_version: str) -> dict[str, str]:
    """The `base_info` object each bot request body carries."""
    return {"channel_version": channel_version}


def getupdates_body(cursor: str, channel_version: str) -> dict[str, Any]:
    """Body of getupdates: the opaque cursor from the previous answer ("" on first contact)."""
    return {"get_updates_buf": cursor, "base_info": base_info(channel_version)}


def sendmessage_body(
    to_user_id: str, text: str, context_token: str | None, client_id: str, channel_version: str
) -> dict[str, Any]:
    """Body of sendmessage for one finished bot text message."""
    msg: dict[str, Any] = {
        "from_user_id": "",
        "to_user_id": to_user_id,
        "client_id": client_id,
        "message_type": int(MessageType.BOT),
        "message_state": int(MessageState.FINISH),
        "item_list": [{"type": int(ItemType.TEXT), "text_item": {"text": text}}],
    }
    if context_token:
        msg["context_token"] = context_token
    return {"msg": msg, "base_info": base_info(channel_version)}


def getconfig_body(user_id: str, context_token: str | None, channel_version: str) -> dict[str, Any]:
    """Body of getconfig, which answers with the user's typing_ticket."""
    body: dict[str, Any] = {"ilink_user_id": user_id, "base_info": base_info(channel_version)}
    if context_token:
        body["context_token"] = context_token
    return body


def sendtyping_body(user_id: str, ticket: str, status: TypingStatus, channel_version: str) -> dict[str, Any]:
    """Body of sendtyping: start (1) or cancel (2) the typing indicator."""
    return {
        "ilink_user_id": user_id,
        "typing_ticket": ticket,
        "status": int(status),
        "base_info": base_info(channel_version),
    }


def new_client_id() -> str:
    """A fresh client_id for one outbound message (the server de-duplicates on it)."""
    return f"memgate-{secrets.token_hex(12)}"


def backoff_delay(attempt: int, base: float = 1.0, cap: float = 30.0) -> float:
    """Delay before retry number `attempt` (1-based): min(cap, base * 2**(attempt-1)).

    1 s, 2 s, 4 s, ... capped at 30 s with the defaults; attempt < 1 counts as 1.
    """
    exponent = min(max(attempt, 1) - 1, 32)
    return min(cap, base * (2**exponent))


# -- responses --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiStatus:
    """The application-level result every iLink answer carries (ret / errcode / errmsg)."""

    ret: int = 0
    errcode: int = 0
    errmsg: str = ""

    @property
    def ok(self) -> bool:
        return self.ret == 0 and self.errcode == 0

    @property
    def session_expired(self) -> bool:
        return SESSION_EXPIRED in (self.ret, self.errcode)


def parse_status(payload: Any) -> ApiStatus:
    """Read ret/errcode/errmsg from a decoded answer; a non-object counts as ret -1."""
    if not isinstance(payload, Mapping):
        return ApiStatus(ret=-1, errmsg="answer is not a JSON object")
    return ApiStatus(as_int(payload.get("ret")), as_int(payload.get("errcode")), as_str(payload.get("errmsg")))


# -- QR login ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QrCode:
    """A login QR code: the id to poll with, and the content to draw."""

    qrcode: str
    content: str


@dataclass(frozen=True, slots=True)
class QrStatus:
    """One get_qrcode_status answer."""

    status: str
    bot_token: str = ""
    ilink_bot_id: str = ""
    baseurl: str = ""
    ilink_user_id: str = ""
    redirect_host: str = ""


def parse_qrcode(payload: Any) -> QrCode | None:
    """Decode a get_bot_qrcode answer; None when it lacks the code or its content."""
    if not isinstance(payload, Mapping):
        return None
    code, content = as_str(payload.get("qrcode")), as_str(payload.get("qrcode_img_content"))
    return QrCode(code, content) if code and content else None


def parse_qr_status(payload: Any) -> QrStatus:
    """Decode a get_qrcode_status answer; anything unreadable counts as "wait"."""
    if not isinstance(payload, Mapping):
        return QrStatus("wait")
    return QrStatus(
        status=as_str(payload.get("status")) or "wait",
        bot_token=as_str(payload.get("bot_token")),
        ilink_bot_id=as_str(payload.get("ilink_bot_id")),
        baseurl=as_str(payload.get("baseurl")),
        ilink_user_id=as_str(payload.get("ilink_user_id")),
        redirect_host=as_str(payload.get("redirect_host")),
    )


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a confirmed QR login yields; stored as JSON (mode 600) in the data folder."""

    bot_token: str
    ilink_bot_id: str
    baseurl: str
    ilink_user_id: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Credentials | None:
        """Parse the stored JSON; None when it is not valid credentials."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, Mapping) or not as_str(data.get("bot_token")):
            return None
        return cls(
            bot_token=as_str(data.get("bot_token")),
            ilink_bot_id=as_str(data.get("ilink_bot_id")),
            baseurl=as_str(data.get("baseurl")),
            ilink_user_id=as_str(data.get("ilink_user_id")),
        )

    def __repr__(self) -> str:  # never print the token
        return f"Credentials(ilink_bot_id={self.ilink_bot_id!r}, baseurl={self.baseurl!r}, bot_token=***)"


# -- small readers ----------------------------------------------------------------------------


def sub_object(item: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """item[key] when it is an object, else an empty one."""
    value = item.get(key)
    return value if isinstance(value, Mapping) else {}


def as_int(value: Any) -> int:
    """An int field, also from a decimal string (ids can exceed JSON's safe integers); 0 otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip())
    return 0


def as_str(value: Any) -> str:
    """A string field (an int becomes its decimal text); "" otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""
