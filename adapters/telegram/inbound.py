"""Telegram updates -> the neutral Message (pure functions, no I/O).

Only this module reads Telegram's message fields for the core: who wrote, where, whether the
bot was addressed (mention, reply, "/cmd@ourbot"), what came with the text (`media`). A group
command addressed to another bot ("/help@other_bot") is none of ours: no Message at all.
"""

from __future__ import annotations

import re

from telegram import Message as TgMessage
from telegram import Update
from telegram.constants import ChatType, MessageEntityType

from bot.message import Kind, Media, Message

__all__ = ["for_another_bot", "message_from_update"]

# A leading "/command@botname": the @botname says which bot of the group the command is for.
_ADDRESSED_COMMAND = re.compile(r"^\s*/[A-Za-z0-9_]+@([A-Za-z0-9_]+)")


def message_from_update(
    update: Update, *, channel: str = "telegram", bot_id: int | None, bot_username: str | None
) -> Message | None:
    """Turn a Telegram update into a neutral Message; None for service messages and other updates.

    The leading "@bot" mention is stripped and "/cmd@bot args" becomes "/cmd args". In a group,
    "/cmd@other_bot" is for another bot: None. A photo, voice, video, sticker or file is named in
    `media`, whether or not a caption came with it.
    """
    edited = update.edited_message is not None
    tg = update.edited_message if edited else update.message
    if tg is None or tg.from_user is None:
        return None
    kind = Kind.EDITED if edited else _kind(tg)
    if kind is None:
        return None
    raw_text = tg.text if tg.text is not None else (tg.caption or "")
    chat = tg.chat
    is_group = chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)
    if is_group and for_another_bot(raw_text, bot_username):
        return None
    reply = tg.reply_to_message
    # In forum topics every message "replies" to the topic's creation message; that is no reply.
    if reply is not None and reply.forum_topic_created is not None:
        reply = None
    user = tg.from_user
    timestamp = (tg.edit_date if edited and tg.edit_date else tg.date)
    return Message(
        channel=channel,
        chat_id=str(chat.id),
        sender_id=str(user.id),
        text=_strip_bot_name(raw_text, bot_username),
        timestamp=timestamp,
        is_group=is_group,
        mentions_bot=_mentions_bot(tg, bot_id, bot_username),
        reply_to=str(reply.message_id) if reply is not None else None,
        reply_to_bot=bool(reply is not None and reply.from_user is not None and bot_id is not None and reply.from_user.id == bot_id),
        message_id=str(tg.message_id),
        thread_id=str(tg.message_thread_id) if chat.is_forum and tg.is_topic_message and tg.message_thread_id else None,
        sender_name=user.full_name or user.username or "",
        kind=kind,
        media=_media(tg),
    )


def for_another_bot(text: str, bot_username: str | None) -> bool:
    """A "/cmd@name" whose name is not ours (unknown ours counts as not ours)."""
    match = _ADDRESSED_COMMAND.match(text)
    if match is None:
        return False
    return bot_username is None or match.group(1).lower() != bot_username.lower()


def _media(tg: TgMessage) -> tuple[Media, ...]:
    """What came with the message besides text: kind, Telegram file id and what Telegram says of it."""
    found: list[Media] = []
    if tg.photo:
        largest = tg.photo[-1]
        found.append(Media(Kind.PHOTO, largest.file_id, mime="image/jpeg", size=largest.file_size))
    # An animation also carries `document` (for old clients): it is one video, not a video and a file.
    document = None if tg.animation is not None else tg.document
    for kind, attachment in ((Kind.VOICE, tg.voice), (Kind.STICKER, tg.sticker), (Kind.VIDEO, tg.video),
                             (Kind.VIDEO, tg.video_note), (Kind.VIDEO, tg.animation), (Kind.FILE, document),
                             (Kind.VOICE, tg.audio)):
        if attachment is not None:
            duration = getattr(attachment, "duration", None)
            found.append(Media(kind, attachment.file_id, mime=getattr(attachment, "mime_type", None) or "",
                               name=getattr(attachment, "file_name", None) or "", size=attachment.file_size,
                               duration=duration.total_seconds() if hasattr(duration, "total_seconds") else duration))
    return tuple(found)


def _kind(tg: TgMessage) -> Kind | None:
    """What a new message carries; None for service messages (joins, pins, titles...)."""
    if tg.photo:
        return Kind.PHOTO
    if tg.voice is not None or tg.audio is not None:
        return Kind.VOICE  # a voice note or an audio file: both are transcribed
    if tg.sticker is not None:
        return Kind.STICKER
    if tg.video is not None or tg.video_note is not None or tg.animation is not None:
        return Kind.VIDEO
    if tg.document is not None:
        return Kind.FILE
    if tg.text is not None:
        return Kind.TEXT
    if tg.effective_attachment is not None:
        return Kind.OTHER  # location, contact, poll, dice...
    return None


def _mentions_bot(tg: TgMessage, bot_id: int | None, bot_username: str | None) -> bool:
    """An @username mention of the bot, a text_mention of it, or a /cmd@bot command."""
    entities = tg.parse_entities() if tg.text is not None else tg.parse_caption_entities()
    handle = f"@{bot_username}".lower() if bot_username else None
    for entity, value in entities.items():
        if entity.type == MessageEntityType.MENTION and handle and value.lower() == handle:
            return True
        if entity.type == MessageEntityType.TEXT_MENTION and entity.user is not None and entity.user.id == bot_id:
            return True
        if entity.type == MessageEntityType.BOT_COMMAND and handle and value.lower().endswith(handle):
            return True
    return False


def _strip_bot_name(text: str, bot_username: str | None) -> str:
    """Drop a leading "@bot" (and the comma or colon after it); "/cmd@bot" becomes "/cmd"."""
    if not bot_username:
        return text
    name = re.escape(bot_username)
    stripped = re.sub(rf"^\s*@{name}\b[\s,:]*", "", text, flags=re.IGNORECASE)
    return re.sub(rf"^(/\w+)@{name}\b", r"\1", stripped, flags=re.IGNORECASE)
