"""The export formats (one JSON object per line, or a Markdown list to read) and an import that is
safe to repeat.

Import keeps ids, so running it twice, or again after it was killed half-way, adds nothing the
first run added: a row whose id is already in the target space is skipped. A row whose id
belongs to another space here (an export of one person imported for another on the same
install) gets an id derived from (target space, id), which is just as stable across re-runs.
Each line is checked on its own: a bad line is reported by number and the rest goes on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memory.store.connection import Conn, Store
from memory.store.rows import NewMemory, insert_memories
from memory.text import normalize, trim

EmbedFn = Callable[[Sequence[str]], np.ndarray]
KINDS = ("chunk", "fact", "task", "skill")
PUBLIC = "public"


def markdown_head(space_id: str) -> str:
    """The first line of a Markdown export."""
    return f"# Memories of {space_id}\n\n"


def markdown_line(d: dict) -> str:
    """One exported row (`MemoryEngine.export_rows`) as a Markdown list item, its id in a comment."""
    tags = f" `{'` `'.join(d['tags'])}`" if d["tags"] else ""
    return (f"- **{d['kind']}** {d['created_at'][:10]}{' (pinned)' if d['pinned'] else ''}{tags}: "
            f"{d['text'].replace(chr(10), ' ')} <!-- {d['id']} -->\n")


class ExportRow(BaseModel):
    """One exported memory. Only `text` is required; unknown keys are ignored (newer exports)."""

    model_config = ConfigDict(extra="ignore")

    text: str = Field(min_length=1)
    id: str = ""
    space_id: str = ""
    kind: str = "fact"
    role: str | None = None
    speaker: str | None = None
    title: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    pinned: bool = False
    session_id: str | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    sources: list[str] = Field(default_factory=list)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        return v


@dataclass(frozen=True, slots=True)
class BadLine:
    line: int
    reason: str


@dataclass
class ImportReport:
    added: int = 0
    present: int = 0                        # already imported (same id in the target space)
    bad: list[BadLine] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)   # the id each good row has here (added or present), once each


def parse_lines(lines: Iterable[bytes | str]) -> Iterator[tuple[int, ExportRow | BadLine]]:
    """(1-based line number, row or the reason it is unusable); blank lines are skipped."""
    for n, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            yield n, BadLine(n, "not UTF-8")
            continue
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            yield n, BadLine(n, f"not JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:  # the C parser stops itself at the interpreter's recursion limit
            yield n, BadLine(n, "not JSON we read (nested too deeply)")
            continue
        if not isinstance(data, dict):
            yield n, BadLine(n, "not a JSON object")
            continue
        try:
            yield n, ExportRow.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"'{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in exc.errors())
            yield n, BadLine(n, problems)


def source_spaces(rows: Iterable[ExportRow]) -> set[str]:
    """The spaces an export came from, public aside."""
    return {r.space_id for r in rows if r.space_id and r.space_id != PUBLIC}


def target_id(row_id: str, target_space: str, taken_elsewhere: bool) -> str:
    """The id a row gets here: its own, or one derived from (space, id) when another space holds it."""
    if row_id and not taken_elsewhere:
        return row_id
    seed = f"{target_space}\x00{row_id}".encode()
    prefix = row_id.split("_", 1)[0] if "_" in row_id else "m"
    return f"{prefix}_{hashlib.sha256(seed).hexdigest()[:12]}"


def import_rows(store: Store, embed: EmbedFn, rows: Iterable[tuple[int, ExportRow]], space_for: Callable[[ExportRow], str],
                *, batch: int = 64, progress: Callable[[int], None] | None = None) -> ImportReport:
    """Insert rows not yet present, one transaction per batch (a kill loses at most a batch,
    which the next run adds). `space_for` maps a row to the space it lands in."""
    report = ImportReport()
    pending: list[tuple[ExportRow, str]] = []
    links: list[tuple[str, str, str]] = []   # (fact id here, source chunk id in the export, space)

    def ids_for(con: Conn, items: Sequence[tuple[ExportRow, str]]) -> list[str]:
        keys = [r.id or _content_key(r) for r, _ in items]
        where = dict(con.execute("SELECT id, space_id FROM memories WHERE id IN (SELECT unnest(?))", [keys]).fetchall())
        return [target_id(k, t, k in where and where[k] != t) for k, (_, t) in zip(keys, items)]

    def missing(con: Conn, items: Sequence[tuple[ExportRow, str]]) -> tuple[list[str], list[tuple[str, ExportRow, str]]]:
        """(the id of every item here, the items not stored yet with their ids)."""
        ids = ids_for(con, items)
        have = {row[0] for row in con.execute("SELECT id FROM memories WHERE id IN (SELECT unnest(?))", [ids]).fetchall()}
        out, seen = [], set()
        for i, (r, t) in zip(ids, items):
            if i not in have and i not in seen:  # the same row twice in one file: keep the first
                seen.add(i)
                out.append((i, r, t))
        return ids, out

    stored: dict[str, None] = {}   # ordered set of the ids the file's rows have here

    def flush() -> None:
        if not pending:
            return
        ids, todo = store.read(lambda c: missing(c, pending))
        texts = [normalize(r.text) for _, r, _ in todo]
        vecs = embed(texts) if todo else None  # embedding happens outside the write lock

        def write(con: Conn) -> int:
            still = {i for i, _, _ in missing(con, [(r, t) for _, r, t in todo])[1]}
            keep = [k for k, (i, _, _) in enumerate(todo) if i in still]
            if keep:
                insert_memories(con, [NewMemory(
                    space_id=t, kind=r.kind, text=texts[k], title=r.title or trim(texts[k], 120), created_at=r.created_at,
                    id=i, role=r.role, speaker=r.speaker, category=r.category, tags=tuple(r.tags), pinned=r.pinned,
                    session_id=r.session_id) for k, (i, r, t) in ((k, todo[k]) for k in keep)], vecs[keep])
            return len(keep)

        added = store.write(write) if todo else 0
        report.added += added
        report.present += len(pending) - added
        stored.update(dict.fromkeys(ids))
        links.extend((i, src, t) for i, r, t in todo for src in r.sources)
        if progress:
            progress(len(pending))
        pending.clear()

    for n, row in rows:
        pending.append((row, space_for(row)))
        if len(pending) >= batch:
            flush()
    flush()
    if links:
        store.write(lambda con: _link_sources(con, links))
    report.ids = list(stored)
    return report


def _content_key(row: ExportRow) -> str:
    """A stable id for a row exported without one (hand-written files)."""
    # Not the timestamp: a row without one gets "now", which differs on every run.
    return "m_" + hashlib.sha256(f"{row.kind}\x00{row.space_id}\x00{row.text}".encode()).hexdigest()[:12]


def _link_sources(con: Conn, links: Sequence[tuple[str, str, str]]) -> None:
    """Provenance: link each fact to its source chunk as imported into the same space."""
    facts, chunks = [], []
    for fact, src, space in links:
        for cand in (src, target_id(src, space, True)):
            facts.append(fact)
            chunks.append(cand)
    spaces = [space for _, _, space in links for _ in range(2)]
    con.execute(
        """INSERT INTO fact_sources
           SELECT l.f, l.c FROM (SELECT unnest(?) AS f, unnest(?) AS c, unnest(?) AS s) l
           JOIN memories m ON m.id = l.c AND m.space_id = l.s
           ON CONFLICT DO NOTHING""", [facts, chunks, spaces])
