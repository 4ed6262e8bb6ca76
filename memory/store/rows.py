"""Rows of the `memories` table (chunks, facts, task summaries, skills): write and read them.

Writes are set-based: a batch of rows goes in as one INSERT over unnested lists, with the
vectors passed as one string cast in SQL.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import numpy as np

from memory.store.connection import Conn
from memory.store.dialect import dialect_of
from memory.text import content_hash, search_text

MemoryKind = Literal["chunk", "fact", "task", "skill"]


def new_id(prefix: str) -> str:
    """A short, readable, unique id such as `f_3k9x7q2m1a` (shown to users, never to the LLM)."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def utc_naive(dt: datetime) -> datetime:
    """Timestamps are stored as naive UTC."""
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    return dt


@dataclass(frozen=True, slots=True)
class NewMemory:
    """One row to insert. `index_text` is what BM25 sees (defaults to title + text)."""

    space_id: str
    kind: MemoryKind
    text: str
    title: str
    created_at: datetime
    id: str = ""
    role: str | None = None
    speaker: str | None = None
    category: str | None = None
    tags: tuple[str, ...] = ()
    pinned: bool = False
    session_id: str | None = None
    turn_id: str | None = None
    task_id: str | None = None
    needs_facts: bool = False
    merge_history: tuple[dict, ...] = ()
    index_text: str | None = None
    hash: str | None = None
    sources: tuple[str, ...] = field(default=())  # facts: the chunk ids they came from


_PREFIX = {"chunk": "c", "fact": "f", "task": "t", "skill": "s"}
_COLUMN_TYPES = {"pinned": "BOOLEAN", "needs_facts": "BOOLEAN", "created_at": "TIMESTAMP"}


def insert_memories(con: Conn, rows: Sequence[NewMemory], vectors: np.ndarray) -> list[str]:
    """Insert rows with their vectors in one statement; returns the ids."""
    if not rows:
        return []
    ids = [r.id or new_id(_PREFIX[r.kind]) for r in rows]
    cols = {
        "id": ids,
        "space_id": [r.space_id for r in rows],
        "kind": [r.kind for r in rows],
        "role": [r.role for r in rows],
        "speaker": [r.speaker for r in rows],
        "title": [r.title for r in rows],
        "text": [r.text for r in rows],
        "search_text": [search_text(r.index_text if r.index_text is not None else f"{r.title}\n{r.text}") for r in rows],
        "content_hash": [r.hash or content_hash(r.text) for r in rows],
        "category": [r.category for r in rows],
        "tags": [json.dumps(list(r.tags)) for r in rows],
        "pinned": [r.pinned for r in rows],
        "session_id": [r.session_id for r in rows],
        "turn_id": [r.turn_id for r in rows],
        "task_id": [r.task_id for r in rows],
        "needs_facts": [r.needs_facts for r in rows],
        "merge_history": [json.dumps(list(r.merge_history)) if r.merge_history else None for r in rows],
        "created_at": [utc_naive(r.created_at) for r in rows],
    }
    names = list(cols)
    d = dialect_of(con)
    select = ", ".join(d.tags_from_json("tags") if n == "tags" else n for n in names)
    # Typed so an all-NULL column (no speaker in the batch) binds the same on both backends.
    unnest = ", ".join(f"unnest(?::{_COLUMN_TYPES.get(n, 'VARCHAR')}[]) AS {n}" for n in names)
    con.execute(
        f"""
        INSERT INTO memories ({", ".join(names)}, embedding, updated_at)
        SELECT {select}, vec, created_at
        FROM (SELECT {unnest}, unnest({d.vectors("?", vectors.shape[1])}) AS vec) AS batch
        """,
        [cols[n] for n in names] + [d.vectors_param(vectors.tolist())],
    )
    links = [(mid, src) for mid, r in zip(ids, rows) for src in r.sources]
    if links:
        add_sources(con, [a for a, _ in links], [b for _, b in links])
    return ids


def add_sources(con: Conn, fact_ids: Sequence[str], chunk_ids: Sequence[str]) -> None:
    """Record provenance: fact -> the chunks it was derived from."""
    con.execute(
        "INSERT INTO fact_sources SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]) ON CONFLICT DO NOTHING",
        [list(fact_ids), list(chunk_ids)],
    )


def ensure_space(con: Conn, space_id: str, kind: str, name: str | None, now: datetime) -> None:
    con.execute(
        "INSERT INTO spaces (id, kind, name, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [space_id, kind, name, utc_naive(now)],
    )


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored memory as the bot and the tools see it."""

    id: str
    space_id: str
    kind: str
    title: str
    text: str
    created_at: datetime
    pinned: bool
    status: str
    role: str | None = None
    speaker: str | None = None
    category: str | None = None
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    superseded_by: str | None = None


RECORD_COLUMNS = "id, space_id, kind, title, text, created_at, pinned, status, role, speaker, category, tags, session_id, superseded_by"


def to_record(row: tuple) -> MemoryRecord:
    return MemoryRecord(*row[:11], tags=tuple(row[11] or ()), session_id=row[12], superseded_by=row[13])


def get_records(con: Conn, ids: Sequence[str], space_ids: Sequence[str]) -> list[MemoryRecord]:
    """Fetch by id, limited to the allowed spaces (the filter is SQL, always)."""
    if not ids or not space_ids:
        return []
    rows = con.execute(
        f"SELECT {RECORD_COLUMNS} FROM memories WHERE id IN (SELECT unnest(?)) AND space_id IN (SELECT unnest(?))",
        [list(ids), list(space_ids)],
    ).fetchall()
    by_id = {r[0]: to_record(r) for r in rows}
    return [by_id[i] for i in ids if i in by_id]


def bump_seq(con: Conn, ids: Sequence[str]) -> None:
    """Mark rows whose text changed as fresh, so keyword search scores them directly."""
    con.execute("UPDATE memories SET seq = nextval('memory_seq') WHERE id IN (SELECT unnest(?))", [list(ids)])
