"""One message's attachments -> what the turn uses: the text the agent reads and memory keeps
("[voice] <transcript>", "[photo] <caption>", "[file: notes.pdf] <caption>"), image parts for a
reply model that sees, and documents to remember.

What cannot be read is a MediaProblem with one line for the person. `wait` says whether the
message stays in the inbox to be tried again: yes when a later try can succeed (no speech
endpoint configured yet, a fetch or transcription that failed), no when it cannot (too big, too
long, a kind of file we do not read).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from bot.channel import FetchesMedia
from bot.errors import MediaError
from bot.media.documents import DocumentError, document_kind, extract_text, finish_text, is_document
from bot.media.sandbox import ReadLimit, SandboxedPdf
from bot.media.speech import Transcriber, TranscriptionError
from bot.media.vision import accepts_images
from bot.message import Kind, Media, Message
from memory.private_files import private_dir, write_private
from memory.text import visible

log = logging.getLogger(__name__)

__all__ = ["NO_SPEECH_NOTE", "UNREADABLE_TEXT", "Attached", "DocumentText", "MediaProblem", "MediaReader",
           "MediaSettings", "ReadMarks"]

MB = 1024 * 1024
NO_SPEECH_TEXT = ("I can't transcribe voice notes yet: no speech-to-text endpoint is set up ([speech] model in "
                  "memgate.toml). I kept your note and will answer it once one is.")
NO_SPEECH_NOTE = "waiting for [speech] model"  # the inbox note of a voice note that waits for the owner
_WHAT = {Kind.VOICE: "voice note", Kind.PHOTO: "photo", Kind.FILE: "file"}
# A file whose read hit a limit, or whose earlier read never finished (the process died in it):
# it is not read again, at this start or any later one (issue 31).
UNREADABLE_TEXT = ("I could not read {name}: reading it takes more time or memory than I give one file (it may be "
                   "damaged), so I stopped and will not try it again. Please send its text, or a smaller file.")


@dataclass(frozen=True)
class MediaSettings:
    vision: Literal["auto", "on", "off"] = "off"  # does the reply model take image parts (auto: ask litellm)
    vision_model: str = ""              # the reply model, as litellm names it
    max_image_bytes: int = 5 * MB
    max_file_bytes: int = 10 * MB
    max_audio_bytes: int = 20 * MB
    max_audio_seconds: float = 300.0
    fetch_timeout: float = 30.0
    max_document_chars: int = 100_000
    max_pdf_pages: int = 100
    keep_audio_dir: Path | None = None  # where voice notes are kept when the owner asked for it


@dataclass(frozen=True)
class DocumentText:
    name: str
    text: str
    cut: bool  # only the start was kept (a cap)


@dataclass(frozen=True)
class Attached:
    """A message with its attachments read."""

    text: str                              # what the agent reads as the person's words, and memory keeps
    images: tuple[str, ...] = ()           # data: URLs, for a reply model that sees
    documents: tuple[DocumentText, ...] = ()
    voice: bool = False


class MediaProblem(Exception):
    def __init__(self, line: str, *, wait: bool = False, note: str = "") -> None:
        super().__init__(note or line)
        self.line = line
        self.wait = wait
        self.note = note or line


class ReadMarks(Protocol):
    """The message's durable record of reads begun (the inbox row: bot.turn.attachments)."""

    async def begin(self) -> bool:
        """Record that a read begins; False when one began before and never finished."""
        ...

    async def end(self) -> None:
        """The read finished (with text or a plain refusal): a later try may read it again."""
        ...


class MediaReader:
    def __init__(self, settings: MediaSettings, transcriber: Transcriber | None,
                 pdfs: SandboxedPdf | None = None) -> None:
        self.settings = settings
        self.transcriber = transcriber
        self.pdfs = pdfs  # None: PDFs are read in a thread of this process (tests of the pure parts)
        self._vision: bool | None = None

    @property
    def vision(self) -> bool:
        """Whether photos go to the reply model (litellm is asked once, on the first photo)."""
        if self._vision is None:
            self._vision = accepts_images(self.settings.vision, self.settings.vision_model)
        return self._vision

    def reads(self, msg: Message) -> bool:
        """Whether this message has something to read here (else it goes on as it did before)."""
        return any(m.kind in (Kind.VOICE, Kind.FILE) or (m.kind is Kind.PHOTO and self.vision) for m in msg.media)

    async def read(self, msg: Message, channel: object, marks: ReadMarks | None = None) -> Attached:
        parts: list[str] = []
        images: list[str] = []
        documents: list[DocumentText] = []
        caption = msg.text.strip()
        voice = False
        for media in msg.media:
            if media.kind is Kind.VOICE:
                transcript = media.transcript.strip() or await self._transcribe(msg, media, channel)
                if caption == transcript:
                    caption = ""  # WeChat sends its transcript as the message text too
                parts.append(f"[voice] {transcript}")
                voice = True
            elif media.kind is Kind.PHOTO and self.vision:
                data = await self._fetch(media, channel, self.settings.max_image_bytes)
                images.append(f"data:{_image_mime(data, media.mime)};base64,{base64.b64encode(data).decode()}")
                parts.append("[photo]")
            elif media.kind is Kind.FILE:
                documents.append(await self._document(media, channel, marks))
                parts.append(f"[file: {_safe_name(media.name) or 'unnamed'}]")
            else:
                parts.append(f"[{media.kind.value}]")
        return Attached(text=" ".join([*parts, caption]).strip(), images=tuple(images), documents=tuple(documents),
                        voice=voice)

    async def _transcribe(self, msg: Message, media: Media, channel: object) -> str:
        if not media.ref:  # WeChat made no transcript and its audio is not ours to play
            raise MediaProblem("This voice note came without a transcript I could use; please type it.")
        if self.transcriber is None:
            raise MediaProblem(NO_SPEECH_TEXT, wait=True, note=NO_SPEECH_NOTE)
        cap = self.settings.max_audio_seconds
        if media.duration is not None and media.duration > cap:
            raise MediaProblem(f"Your voice note is {_minutes(media.duration)} long; I transcribe up to "
                               f"{_minutes(cap)}. Please send a shorter one or type it.")
        audio = await self._fetch(media, channel, self.settings.max_audio_bytes)
        if self.settings.keep_audio_dir is not None:
            self._keep(msg, media, audio)
        try:
            transcript = await self.transcriber.transcribe(audio, filename=_audio_name(media), mime=media.mime)
        except TranscriptionError as exc:
            log.warning("transcription failed for a voice note in %s: %s", msg.conversation_key, exc)
            raise MediaProblem("The speech-to-text server did not answer, so I could not transcribe your voice "
                               "note. I kept it and will try again.", wait=True, note=f"transcription failed: {exc}") from None
        if not transcript:
            raise MediaProblem("I could not make out any words in your voice note; please try again or type it.")
        return transcript

    async def _document(self, media: Media, channel: object, marks: ReadMarks | None) -> DocumentText:
        name = _safe_name(media.name) or "the file"
        if not is_document(media):
            raise MediaProblem(f"I can read text, Markdown and PDF files; {name} is none of them.")
        data = await self._fetch(media, channel, self.settings.max_file_bytes)
        s = self.settings
        try:
            if document_kind(media, data) == "pdf" and self.pdfs is not None:
                text, cut = finish_text(*await self._pdf(data, name, marks), name, s.max_document_chars)
            else:  # text: decoding is linear in the capped download, so a thread is enough
                text, cut = await asyncio.to_thread(extract_text, media, data, max_chars=s.max_document_chars,
                                                    max_pages=s.max_pdf_pages)
        except DocumentError as exc:
            raise MediaProblem(str(exc)) from None
        return DocumentText(name=_safe_name(media.name) or "document", text=text, cut=cut)

    async def _pdf(self, data: bytes, name: str, marks: ReadMarks | None) -> tuple[str, bool]:
        """The PDF's text from a child process with limits. The message's row records the read
        first: a read that hits a limit, or that the process dies in, is never begun again."""
        assert self.pdfs is not None
        if marks is not None and not await marks.begin():
            log.warning("a PDF whose earlier read did not finish is answered as unreadable, not read again")
            raise MediaProblem(UNREADABLE_TEXT.format(name=name))
        try:
            text, cut = await self.pdfs.text(data, label=name, max_pages=self.settings.max_pdf_pages,
                                             max_chars=self.settings.max_document_chars)
        except ReadLimit as limit:  # the mark stays: the verdict outlives a restart
            log.warning("reading a PDF stopped at the %s limit; it is answered as unreadable", limit.why)
            raise MediaProblem(UNREADABLE_TEXT.format(name=name)) from None
        except DocumentError:
            if marks is not None:
                await marks.end()
            raise
        except asyncio.CancelledError:  # the gateway stops: not the file's fault, a later start reads it
            if marks is not None:
                with contextlib.suppress(Exception):
                    await marks.end()
            raise
        if marks is not None:
            await marks.end()
        return text, cut

    async def _fetch(self, media: Media, channel: object, cap: int) -> bytes:
        what = _WHAT.get(media.kind, "attachment")
        if not isinstance(channel, FetchesMedia) or not media.ref:
            raise MediaProblem(f"I can't fetch this {what} here; please describe it in text.")
        if media.size is not None and media.size > cap:
            raise MediaProblem(_too_big(what, media.size, cap))
        try:
            return await channel.fetch_media(media, max_bytes=cap, timeout=self.settings.fetch_timeout)
        except MediaError as exc:
            if exc.too_large:  # the size the platform gave, never the message's claim the bytes belied
                raise MediaProblem(_too_big(what, exc.size, cap)) from None
            log.warning("fetching a %s failed: %s", what, exc)
            failure = str(exc)
        except Exception as exc:  # a channel's own failure must not lose the message either
            log.warning("fetching a %s failed", what, exc_info=True)
            failure = type(exc).__name__
        raise MediaProblem(f"I could not fetch your {what} just now. I kept your message and will try again.",
                           wait=True, note=f"fetch failed: {failure}")

    def _keep(self, msg: Message, media: Media, audio: bytes) -> None:
        """The owner asked to keep voice notes: one private file per note, named by conversation."""
        folder = private_dir(self.settings.keep_audio_dir)
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{msg.conversation_key}-{msg.message_id or msg.timestamp.timestamp()}")
        write_private(folder / f"{stem}{Path(_audio_name(media)).suffix}", audio)


def _too_big(what: str, size: int | None, cap: int) -> str:
    size_text = f" is {_size(size)};" if size else " is too big:"
    return f"Your {what}{size_text} I take up to {_size(cap)}."


def _size(n: int) -> str:
    return f"{n / MB:.3g} MB" if n >= MB else f"{max(1, round(n / 1024))} KB"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _safe_name(name: str) -> str:
    """A file name as we show and store it: no path, no control, invisible or bracket characters, 120 at most."""
    base = re.split(r"[\\/]", name)[-1]
    return re.sub(r"[\[\]<>]", "", visible(base)).strip()[:120]


def _audio_name(media: Media) -> str:
    """A file name whose extension tells the speech server the format (it reads the name)."""
    if media.name:
        return _safe_name(media.name)
    mime = media.mime.lower()
    ext = {"audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/mp4": "m4a", "audio/x-m4a": "m4a", "audio/wav": "wav",
           "audio/x-wav": "wav", "audio/webm": "webm", "audio/amr": "amr", "audio/flac": "flac"}.get(mime, "ogg")
    return f"voice.{ext}"


def _image_mime(data: bytes, declared: str) -> str:
    """The picture's type from its first bytes (platforms label photos loosely), else as declared."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return declared if declared.startswith("image/") else "image/jpeg"
