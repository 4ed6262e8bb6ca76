"""Raw mode: every message becomes a chunk, with no LLM (no titles, no facts, no dedup but the
exact-hash one). Used by users who run without an LLM for memory, by the benchmark, and as the
fallback of an ingest whose LLM failed past its retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.embed import Embedder
from memory.store.rows import NewMemory, insert_memories
from memory.store.connection import Conn, Store
from memory.store.vectors import cache_for
from memory.text import content_hash, normalize, trim

TITLE_CHARS = 120
CONTEXT_CHARS = 300


@dataclass(frozen=True, slots=True)
class RawMessage:
    """One message to store as it is. `context` is the message it answers (for retrieval)."""

    space_id: str
    role: str
    text: str
    created_at: datetime
    speaker: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    context: str | None = None
    context_speaker: str | None = None


def embed_text(text: str, speaker: str | None, context: str | None, context_speaker: str | None) -> str:
    """What a chunk's vector is computed from: who said it, and what it answered.

    A reply such as "Yes, last Tuesday!" means nothing alone; with the question it answers it
    becomes findable by that question.
    """
    own = f"{speaker}: {text}" if speaker else text
    if not context:
        return own
    ctx = trim(context, CONTEXT_CHARS)
    return f"{context_speaker + ': ' if context_speaker else ''}{ctx}\n{own}"


def index_text(text: str, speaker: str | None, created_at: datetime) -> str:
    """What BM25 sees for a chunk: speaker, text and the date in words (month names match questions
    in English and, through tokenize's date words, 4月5日 in Chinese; the day unpadded, as said)."""
    return f"{speaker or ''} {text} {created_at.day} {created_at:%B %Y}"


def raw_rows(messages: Sequence[RawMessage], needs_facts: bool = False) -> list[NewMemory]:
    return [
        NewMemory(
            space_id=m.space_id, kind="chunk", role=m.role, speaker=m.speaker, text=normalize(m.text),
            title=trim(m.text, TITLE_CHARS), created_at=m.created_at, session_id=m.session_id,
            turn_id=m.turn_id, needs_facts=needs_facts and m.role == "user",
            index_text=index_text(m.text, m.speaker, m.created_at), hash=content_hash(m.text),
        )
        for m in messages
    ]


def store_raw(store: Store, embedder: Embedder, messages: Sequence[RawMessage], *, dedup: bool = True) -> list[str]:
    """Embed and insert messages as chunks in one transaction; exact duplicates in a space are skipped."""
    if dedup:
        messages = drop_exact_duplicates(store, messages)
    if not messages:
        return []
    vectors = embedder.embed_passages([embed_text(m.text, m.speaker, m.context, m.context_speaker) for m in messages])
    ids = store.write(lambda con: insert_memories(con, raw_rows(messages), vectors))
    spaces = [m.space_id for m in messages]
    for s in dict.fromkeys(spaces):  # each space's vector file, built before its first question (issue 33)
        cache_for(store).written([s], spaces.count(s))
    return ids


def drop_exact_duplicates(store: Store, messages: Sequence[RawMessage]) -> list[RawMessage]:
    """Keep messages whose normalised hash is new in their space (and within the batch)."""
    hashes = [content_hash(m.text) for m in messages]

    def existing(con: Conn) -> set[tuple[str, str]]:
        rows = con.execute(
            "SELECT space_id, content_hash FROM memories WHERE kind = 'chunk' AND status = 'active' "
            "AND content_hash IN (SELECT unnest(?)) AND space_id IN (SELECT unnest(?))",
            [hashes, list({m.space_id for m in messages})],
        ).fetchall()
        return {(a, b) for a, b in rows}

    seen = store.read(existing)
    kept = []
    for m, h in zip(messages, hashes):
        if (m.space_id, h) not in seen:
            seen.add((m.space_id, h))
            kept.append(m)
    return kept
