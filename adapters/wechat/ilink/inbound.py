"""getupdates answers -> the neutral Message (pure functions, no I/O), as telegram/inbound.py is
for Telegram: what a batch holds (its status, messages, cursor and advertised poll timeout), each
WeixinMessage reduced to what the gateway can use, and the Message of a DM.

Malformed messages are dropped, never raised: one bad entry must not stop the poll loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from adapters.wechat.ilink.media import media_of
from adapters.wechat.ilink.protocol import ApiStatus, ItemType, MessageType, as_int, as_str, parse_status, sub_object
from bot.message import Kind, Media, Message

__all__ = ["UpdatesBatch", "WireMessage", "parse_message", "parse_updates", "to_message"]


@dataclass(frozen=True, slots=True)
class WireMessage:
    """One inbound iLink message, reduced to what the gateway can use."""

    message_id: str
    from_user_id: str
    to_user_id: str
    create_time_ms: int
    message_type: int
    group_id: str
    context_token: str
    kind: Kind
    text: str
    media: tuple[Media, ...] = ()  # images and files with their CDN descriptor, voice with its transcript

    @property
    def from_bot(self) -> bool:
        return self.message_type == MessageType.BOT

    @property
    def in_group(self) -> bool:
        return bool(self.group_id)


@dataclass(frozen=True, slots=True)
class UpdatesBatch:
    """A decoded getupdates answer."""

    status: ApiStatus
    messages: tuple[WireMessage, ...]
    cursor: str  # "" when the server sent none: keep the old one
    longpolling_timeout_ms: int | None


def parse_updates(payload: Any) -> UpdatesBatch:
    """Decode a getupdates answer; malformed messages are dropped, never raised."""
    status = parse_status(payload)
    if not isinstance(payload, Mapping):
        return UpdatesBatch(status, (), "", None)
    raw_msgs = payload.get("msgs")
    messages = tuple(
        m for m in (parse_message(raw) for raw in (raw_msgs if isinstance(raw_msgs, list) else [])) if m is not None
    )
    cursor = payload.get("get_updates_buf")
    timeout = as_int(payload.get("longpolling_timeout_ms"))
    return UpdatesBatch(status, messages, cursor if isinstance(cursor, str) else "", timeout if timeout > 0 else None)


def parse_message(raw: Any) -> WireMessage | None:
    """Decode one WeixinMessage; None when it has no sender."""
    if not isinstance(raw, Mapping):
        return None
    sender = as_str(raw.get("from_user_id"))
    if not sender:
        return None
    items = raw.get("item_list")
    items = items if isinstance(items, list) else []
    kind, text = _content(items)
    message_id = raw.get("message_id")
    return WireMessage(
        message_id=str(message_id) if message_id not in (None, "") else "",
        from_user_id=sender,
        to_user_id=as_str(raw.get("to_user_id")),
        create_time_ms=as_int(raw.get("create_time_ms")),
        message_type=as_int(raw.get("message_type")),
        group_id=as_str(raw.get("group_id")),
        context_token=as_str(raw.get("context_token")),
        kind=kind,
        text=text,
        media=media_of(items),
    )


_MEDIA_KINDS = {ItemType.IMAGE: Kind.PHOTO, ItemType.FILE: Kind.FILE, ItemType.VIDEO: Kind.VIDEO}


def _content(items: list[Any]) -> tuple[Kind, str]:
    """Kind and text of an item list.

    Text items win (their texts joined by newlines); else a voice item, with its transcript as
    the text when WeChat made one; else the first image/file/video with empty text; else OTHER.
    """
    texts: list[str] = []
    voice: list[str] | None = None
    media: Kind | None = None
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = as_int(item.get("type"))
        if kind == ItemType.TEXT:
            text = as_str(sub_object(item, "text_item").get("text"))
            if text:
                texts.append(text)
        elif kind == ItemType.VOICE:
            voice = voice if voice is not None else []
            transcript = as_str(sub_object(item, "voice_item").get("text"))
            if transcript:
                voice.append(transcript)
        elif kind in _MEDIA_KINDS and media is None:
            media = _MEDIA_KINDS[ItemType(kind)]
    if texts:
        return Kind.TEXT, "\n".join(texts)
    if voice is not None:
        return Kind.VOICE, "\n".join(voice)
    if media is not None:
        return media, ""
    return Kind.OTHER, ""


def to_message(wire: WireMessage, channel: str, now: datetime) -> Message:
    """The neutral Message for a DM; `now` stands in when the server sent no create_time_ms."""
    when = now
    if wire.create_time_ms > 0:
        try:
            when = datetime.fromtimestamp(wire.create_time_ms / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            pass  # a nonsense time from the server must not stop the poll loop
    return Message(
        channel=channel,
        chat_id=wire.from_user_id,
        sender_id=wire.from_user_id,
        text=wire.text,
        timestamp=when,
        is_group=False,
        message_id=wire.message_id or None,
        kind=wire.kind,
        media=wire.media,
    )
