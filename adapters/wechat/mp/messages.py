"""Official Account pushes -> the neutral Message, and replies -> text parts WeChat takes (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime

from adapters.plaintext import markdown_to_plain
from adapters.split import split_message
from adapters.wechat.mp.xml_codec import InboundXml
from bot.message import Kind, Media, Message

__all__ = ["MEDIA_ID_REF", "TEXT_LIMIT_BYTES", "dedup_key", "message_from_push", "split_for_wechat"]

MEDIA_ID_REF = "media_id:"  # a Media ref fetched through media/get rather than by URL
TEXT_LIMIT_BYTES = 2048  # passive and customer-service text content limit, in UTF-8 bytes
_KIND_BY_TYPE = {
    "image": Kind.PHOTO,
    "voice": Kind.VOICE,
    "video": Kind.VIDEO,
    "shortvideo": Kind.VIDEO,
    "file": Kind.FILE,
    "location": Kind.OTHER,
    "link": Kind.OTHER,
}


def message_from_push(push: InboundXml, channel: str = "wechat_mp") -> Message | None:
    """The neutral Message for a push, or None for events that need no answer.

    Voice with speech recognition is WeChat's transcript, used as it is (text and the voice
    Media's transcript); an image is a photo Media fetched by its PicUrl; other media become their
    Kind with text "". A subscribe event becomes Kind.OTHER with text "" so the gateway can greet
    the new follower.
    """
    media: tuple[Media, ...] = ()
    if push.msg_type == "event":
        if push.event.lower() != "subscribe":
            return None
        kind, text = Kind.OTHER, ""
    elif push.msg_type == "text":
        kind, text = Kind.TEXT, push.content
    elif push.msg_type == "voice":
        # WeChat's recognition is used as it is; without it the audio is fetched by its MediaId
        # (media/get) for our own speech endpoint.
        kind, text = Kind.VOICE, push.recognition
        ref = "" if push.recognition or not push.media_id else f"{MEDIA_ID_REF}{push.media_id}"
        media = (Media(Kind.VOICE, ref, mime=f"audio/{push.format.lower() or 'amr'}", transcript=push.recognition),)
    elif push.msg_type == "image":
        kind, text = Kind.PHOTO, ""
        url = push.pic_url if push.pic_url.startswith(("https://", "http://")) else ""
        media = (Media(Kind.PHOTO, url or (f"{MEDIA_ID_REF}{push.media_id}" if push.media_id else ""), mime="image/jpeg"),)
    else:
        kind, text = _KIND_BY_TYPE.get(push.msg_type, Kind.OTHER), ""
    return Message(
        channel=channel,
        chat_id=push.from_user,
        sender_id=push.from_user,
        text=text,
        timestamp=datetime.fromtimestamp(push.create_time, UTC),
        is_group=False,
        message_id=dedup_key(push),
        kind=kind,
        media=media,
    )


def dedup_key(push: InboundXml) -> str:
    """What WeChat keeps across retries: MsgId for messages, sender + CreateTime for events."""
    return push.msg_id or f"{push.from_user}:{push.create_time}"


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def markdown_parts(text: str, limit: int = TEXT_LIMIT_BYTES) -> list[str]:
    """Markdown cut into pieces of at most `limit` UTF-8 bytes (code blocks kept whole where they fit)."""
    return split_message(text, limit, measure=_utf8_len) if text.strip() else []


def split_for_wechat(text: str, limit: int = TEXT_LIMIT_BYTES) -> list[str]:
    """Markdown -> plain text parts of at most `limit` UTF-8 bytes, in order, none blank.

    Split on the markdown first (so code blocks stay whole where they can), then flatten each
    part; flattening may lengthen a part (link targets), so an oversized result is split again.
    """
    parts: list[str] = []
    for chunk in markdown_parts(text, limit):
        plain = markdown_to_plain(chunk).strip()
        if _utf8_len(plain) > limit:
            parts.extend(split_message(plain, limit, measure=_utf8_len))
        elif plain:
            parts.append(plain)
    return [part for part in parts if part.strip()]
