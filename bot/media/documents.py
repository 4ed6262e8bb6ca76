"""Text out of the files people send: plain text and Markdown decoded, PDF read with pypdf.

Pure functions over bytes; what is kept is capped (pages and characters). The gateway runs
`pdf_text` in a child process with limits (bot/media/sandbox.py) and the rest in a thread.
Cutting the text into pieces of memory is memory's work (memory/ingest/documents.py).
"""

from __future__ import annotations

import io
import logging
import re

from bot.message import Media

__all__ = ["DocumentError", "document_kind", "extract_text", "finish_text", "is_document", "pdf_text"]

TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".mdown", ".log")
TEXT_MIMES = ("text/plain", "text/markdown", "text/x-markdown")
PDF_MIME = "application/pdf"


class DocumentError(ValueError):
    """The file is not one we read, or it is damaged; the message says which, for the person."""


def document_kind(media: Media, data: bytes | None = None) -> str | None:
    """"pdf", "text", or None for a file we do not read (by name, type and, given them, first bytes)."""
    name = media.name.lower()
    mime = media.mime.lower().split(";")[0].strip()
    if mime == PDF_MIME or name.endswith(".pdf") or (data is not None and data.startswith(b"%PDF-")):
        return "pdf"
    if mime in TEXT_MIMES or name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def is_document(media: Media) -> bool:
    """A file we can read, by what the platform says of it (name, type)."""
    return document_kind(media) is not None


def extract_text(media: Media, data: bytes, *, max_chars: int, max_pages: int) -> tuple[str, bool]:
    """(the text, whether it was cut at a cap). Raises DocumentError for what cannot be read."""
    kind = document_kind(media, data)
    label = media.name or "the file"
    if kind == "pdf":
        text, cut = pdf_text(data, label, max_pages, max_chars)
    elif kind == "text":
        text, cut = _decode(data, label), False
    else:
        raise DocumentError(f"I can read text, Markdown and PDF files; {label} is none of them.")
    return finish_text(text, cut, label, max_chars)


def finish_text(text: str, cut: bool, label: str, max_chars: int) -> tuple[str, bool]:
    """The extracted text tidied and capped; DocumentError when none was found."""
    text = re.sub(r"[ \t]+\n", "\n", text).strip()
    if not text:
        raise DocumentError(f"I found no text in {label} (a scanned PDF has only pictures of pages).")
    if len(text) > max_chars:
        return text[:max_chars], True
    return text, cut


def _decode(data: bytes, label: str) -> str:
    for encoding in ("utf-8-sig", "utf-16") if data.startswith((b"\xff\xfe", b"\xfe\xff")) else ("utf-8-sig", "gb18030"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if "\x00" not in text:
            return text
    raise DocumentError(f"{label} is not text I can decode (UTF-8 or GB18030).")


def pdf_text(data: bytes, label: str, max_pages: int, max_chars: int) -> tuple[str, bool]:
    """The pages' text up to the caps (untrusted bytes: the gateway runs this in bot/media/sandbox.py)."""
    from pypdf import PdfReader  # imported on first use: most gateways never read a PDF
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about odd PDFs are noise to the owner
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError(f"{label} is protected by a password; I cannot open it.")
        pages, total = [], 0
        for n, page in enumerate(reader.pages):
            if n >= max_pages or total > max_chars:
                return "\n\n".join(pages), True
            text = page.extract_text() or ""
            pages.append(text)
            total += len(text)
        return "\n\n".join(pages), False
    except DocumentError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise DocumentError(f"{label} looks damaged; I could not read it as a PDF ({type(exc).__name__}).") from None
