"""What crosses the adapter/bot seam: a neutral inbound Message and an outbound Reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from memory.text import visible


class Kind(StrEnum):
    """What the platform delivered; anything but TEXT gets an honest short answer if it has no text."""

    TEXT = "text"
    PHOTO = "photo"
    VOICE = "voice"
    STICKER = "sticker"
    FILE = "file"
    VIDEO = "video"
    EDITED = "edited"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Media:
    """Something that came with a message besides text: its kind and the platform's opaque file id.

    The rest is what the platform said about it, when it did, so the gateway can refuse an
    oversized or overlong attachment before fetching it; `transcript` is the platform's own
    reading of a voice note (WeChat's), used as it is.
    """

    kind: Kind
    ref: str
    mime: str = ""
    name: str = ""           # a file's name as the person sent it
    size: int | None = None  # bytes
    duration: float | None = None  # seconds (voice, audio, video)
    transcript: str = ""

    def __post_init__(self) -> None:
        # A file name is shown to the person and the model: no bidi override may turn
        # "invoice\u202efdp.exe" around, no zero-width mark hide part of it (every channel, once).
        if self.name:
            object.__setattr__(self, "name", visible(self.name))


@dataclass(frozen=True, slots=True)
class Message:
    """One inbound message, already stripped of every platform object.

    `chat_id` names the conversation place (a DM or a group); `thread_id` separates forum topics
    inside one group. `sender_id` is the platform's stable id of the person.
    """

    channel: str
    chat_id: str
    sender_id: str
    text: str
    timestamp: datetime
    is_group: bool = False
    mentions_bot: bool = False
    reply_to: str | None = None
    reply_to_bot: bool = False
    message_id: str | None = None
    thread_id: str | None = None
    sender_name: str = ""
    kind: Kind = Kind.TEXT
    media: tuple[Media, ...] = ()  # a photo, voice, file... that came with it (a caption is `text`)

    def __post_init__(self) -> None:
        # A display name is shown in prompts, lists and the owner's pairing requests: invisible
        # controls (bidi overrides, zero-width marks) are dropped for every channel here, once.
        if self.sender_name:
            object.__setattr__(self, "sender_name", visible(self.sender_name))

    @property
    def text_for_agent(self) -> str:
        """The text as the agent reads it: what came with it named first ("[photo] look at this")."""
        if not self.media:
            return self.text
        return " ".join([*(f"[{m.kind.value}]" for m in self.media), self.text]).strip()

    @property
    def conversation_key(self) -> str:
        """The key of this message's FIFO queue and session: one per chat (and forum topic)."""
        base = f"{self.channel}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base

    @property
    def addressed_to_bot(self) -> bool:
        """In a group the bot answers only when mentioned, replied to, or given a command."""
        return (not self.is_group) or self.mentions_bot or self.reply_to_bot or self.text.startswith("/")


@dataclass(frozen=True, slots=True)
class Document:
    """A file to send (e.g. the /export JSONL)."""

    filename: str
    data: bytes
    mime: str = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class Image:
    """A picture to show (e.g. the /pulse chart). A channel that can show pictures sends it with
    `caption` in place of the reply's text; the others send the text, which must stand on its own."""

    filename: str
    data: bytes
    caption: str = ""
    mime: str = "image/png"


@dataclass(frozen=True, slots=True)
class Reply:
    """One outbound answer to a conversation. Adapters split and format it for their platform."""

    channel: str
    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to: str | None = None
    document: Document | None = None
    image: Image | None = None
    # The user the reply is for: needed by channels that address people, not chats (iLink).
    recipient_id: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
