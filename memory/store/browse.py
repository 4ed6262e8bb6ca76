"""Browsing one space's memories as people see them: filtered pages with totals, one memory with
its version and sources, and versioned edits (optimistic concurrency: an edit names the version
it was made against and is refused when the memory moved on).

Every statement takes exactly one space id and filters on it in SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from memory.store.connection import Conn, vector_literal
from memory.store.dialect import dialect_of
from memory.store.rows import bump_seq, utc_naive
from memory.text import content_hash, normalize, search_text, trim


@dataclass(frozen=True, slots=True)
class MemoryView:
    """A memory with what the API shows: version, provenance and (from recall) a score."""

    id: str
    space_id: str
    kind: str
    text: str
    title: str
    category: str | None
    tags: tuple[str, ...]
    pinned: bool
    status: str
    created_at: datetime
    updated_at: datetime
    version: int
    superseded_by: str | None
    sources: tuple[str, ...] = ()
    score: float | None = None


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """What `GET /memories` may narrow by (None = any)."""

    kinds: tuple[str, ...] = ()
    category: str | None = None
    tag: str | None = None
    pinned: bool | None = None
    since: datetime | None = None
    until: datetime | None = None
    statuses: tuple[str, ...] = field(default=("active",))


_VIEW = """m.id, m.space_id, m.kind, m.text, m.title, m.category, m.tags, m.pinned, m.status, m.created_at,
           m.updated_at, coalesce(v.version, 1), m.superseded_by,
           coalesce((SELECT array_agg(chunk_id ORDER BY chunk_id) FROM fact_sources WHERE fact_id = m.id), ARRAY[]::VARCHAR[])"""
_FROM = "memories m LEFT JOIN memory_versions v ON v.id = m.id"


def _view(row: tuple) -> MemoryView:
    return MemoryView(*row[:6], tuple(row[6] or ()), *row[7:13], tuple(row[13] or ()))


def _where(space_id: str, f: MemoryFilter) -> tuple[str, dict]:
    clauses = ["m.space_id = $space", "m.status IN (SELECT unnest($statuses))"]
    params: dict = {"space": space_id, "statuses": list(f.statuses)}
    if f.kinds:
        clauses.append("m.kind IN (SELECT unnest($kinds))")
        params["kinds"] = list(f.kinds)
    if f.category is not None:
        clauses.append("m.category = $category")
        params["category"] = f.category
    if f.tag is not None:
        clauses.append("$tag = ANY(m.tags)")
        params["tag"] = f.tag
    if f.pinned is not None:
        clauses.append("m.pinned = $pinned")
        params["pinned"] = f.pinned
    if f.since is not None:
        clauses.append("m.created_at >= $since")
        params["since"] = utc_naive(f.since)
    if f.until is not None:
        clauses.append("m.created_at < $until")
        params["until"] = utc_naive(f.until)
    return " AND ".join(clauses), params


def list_page(con: Conn, space_id: str, f: MemoryFilter, limit: int, offset: int) -> tuple[list[MemoryView], int]:
    """One page (pinned first, newest first) and the total matching the filter."""
    where, params = _where(space_id, f)
    total = con.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]
    rows = con.execute(f"""SELECT {_VIEW} FROM {_FROM} WHERE {where}
                           ORDER BY m.pinned DESC, m.created_at DESC, m.id LIMIT $limit OFFSET $offset""",
                       {**params, "limit": limit, "offset": offset}).fetchall()
    return [_view(r) for r in rows], total


def get_views(con: Conn, space_id: str, ids: Sequence[str], f: MemoryFilter | None = None) -> list[MemoryView]:
    """These ids, in this order, if they are in the space (and match `f`, when given)."""
    if not ids:
        return []
    where, params = _where(space_id, f or MemoryFilter(statuses=("active", "retired", "archived", "deleted")))
    rows = con.execute(f"SELECT {_VIEW} FROM {_FROM} WHERE {where} AND m.id IN (SELECT unnest($ids))",
                       {**params, "ids": list(ids)}).fetchall()
    by_id = {r[0]: _view(r) for r in rows}
    return [by_id[i] for i in ids if i in by_id]


def matching_ids(con: Conn, space_id: str, ids: Sequence[str], f: MemoryFilter) -> list[str]:
    """Those of `ids` (in their order) that are in the space and match `f`: one query, no row built."""
    if not ids:
        return []
    where, params = _where(space_id, f)
    found = {r[0] for r in con.execute(f"SELECT m.id FROM memories m WHERE {where} AND m.id IN (SELECT unnest($ids))",
                                       {**params, "ids": list(ids)}).fetchall()}
    return [i for i in ids if i in found]


class StaleVersion(Exception):
    """The memory changed since the version the edit was made against."""

    def __init__(self, current: int) -> None:
        super().__init__(f"the memory is at version {current}")
        self.current = current


@dataclass(frozen=True, slots=True)
class Edit:
    """What a person may change on a memory (None = leave as is)."""

    text: str | None = None
    tags: tuple[str, ...] | None = None
    pinned: bool | None = None


def apply_edit(con: Conn, space_id: str, memory_id: str, edit: Edit, expected: int | None,
               vector: np.ndarray | None, now: datetime, *, new_version: bool = True) -> bool:
    """Apply `edit` to an active memory of the space; False if there is none. Raises StaleVersion
    when `expected` is given and is not the current version. A text change needs its `vector`.
    `new_version` False: part of creating the memory (it stays at its first version)."""
    row = con.execute(f"SELECT coalesce(v.version, 1) FROM {_FROM} WHERE m.id = ? AND m.space_id = ? AND m.status = 'active'",
                      [memory_id, space_id]).fetchone()
    if row is None:
        return False
    if expected is not None and expected != row[0]:
        raise StaleVersion(row[0])
    sets, params = ["updated_at = ?"], [utc_naive(now)]
    if edit.text is not None:
        text = normalize(edit.text)
        sets += ["text = ?", "title = ?", "search_text = ?", "content_hash = ?",
                 f"embedding = {dialect_of(con).vector('?', len(vector))}"]
        params += [text, trim(text, 120), search_text(text), content_hash(text), vector_literal(vector.tolist())]
    if edit.tags is not None:
        sets.append("tags = ?::VARCHAR[]")
        params.append(list(edit.tags))
    if edit.pinned is not None:
        sets.append("pinned = ?")
        params.append(edit.pinned)
    con.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", [*params, memory_id])
    if edit.text is not None:
        bump_seq(con, [memory_id])
    if not new_version:
        return True
    con.execute("INSERT INTO memory_versions VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                [memory_id, row[0] + 1])
    return True


def bump_versions(con: Conn, ids: Sequence[str]) -> None:
    """A change made elsewhere (forget): the memories move to their next version."""
    con.execute("""INSERT INTO memory_versions SELECT m.id, coalesce(v.version, 1) + 1 FROM memories m
                   LEFT JOIN memory_versions v ON v.id = m.id WHERE m.id IN (SELECT unnest(?))
                   ON CONFLICT (id) DO UPDATE SET version = excluded.version""", [list(ids)])
