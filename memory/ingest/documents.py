"""A document the person sent, kept as chunks of their memory ("remember this document").

No LLM: the pieces are the document's own text, cut at paragraph, line, sentence or space
boundaries, each titled with the file name and its place ("notes.pdf (2/5)") so recall shows
where a passage came from. Secrets are redacted before anything is stored; a piece already in
the space (the same file sent twice) is not stored again.
"""

from __future__ import annotations

from datetime import datetime

from memory.store.rows import NewMemory
from memory.redaction import redact
from memory.text import content_hash, normalize

__all__ = ["document_rows", "split_document"]

DOCUMENT_TAG = "document"


def split_document(text: str, size: int) -> list[str]:
    """Pieces of at most `size` characters, cut at the last paragraph, line, sentence or space
    boundary in each window (a hard cut only when a window has none); none blank, order kept,
    nothing but the whitespace at the cuts dropped."""
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        if len(rest) <= size:
            pieces.append(rest)
            break
        window = rest[:size]
        cut = 0
        for sep in ("\n\n", "\n", ". ", "。", " "):
            at = window.rfind(sep)
            if at > size // 3:
                cut = at + len(sep)
                break
        cut = cut or size
        piece, rest = rest[:cut].strip(), rest[cut:].strip()
        if piece:
            pieces.append(piece)
    return pieces


def document_rows(name: str, text: str, *, space_id: str, created_at: datetime, piece_chars: int,
                  session_id: str | None = None, turn_id: str | None = None) -> list[NewMemory]:
    """The chunk rows of one document (redacted, split, titled with the file name)."""
    pieces = [normalize(p) for p in split_document(redact(text), piece_chars)]
    pieces = [p for p in pieces if p]
    n = len(pieces)
    rows = []
    for i, piece in enumerate(pieces, 1):
        title = name if n == 1 else f"{name} ({i}/{n})"
        rows.append(NewMemory(space_id=space_id, kind="chunk", text=piece, title=title, created_at=created_at,
                              role="user", tags=(DOCUMENT_TAG,), session_id=session_id, turn_id=turn_id,
                              index_text=f"{title}\n{piece}", hash=content_hash(piece)))
    return rows
