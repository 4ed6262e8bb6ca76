"""MemoryEngine: the memory library's one entry point for the layers above.

It wires the store, the embedder, recall, capture and the ingest worker, and offers the
operations the tools and chat commands need (search, get, timeline, store, forget, pin,
export, import, re-embed). Every read and write names the spaces it may touch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory.erase import EraseCounts, EraseRules
from memory.forget import ForgetHook, ForgetResult
from memory.forget import forget as forget_everywhere
from memory.ingest.capture import CapturedTurn, capture
from memory.ingest.documents import document_rows
from memory.embed import Embedder
from memory.store.keywords import fresh_count, rebuild_index
from memory.ingest.settings import IngestSettings
from memory.ingest.worker import IngestWorker
from memory.llm import LLM
from memory.store.rows import (
    RECORD_COLUMNS, MemoryRecord, NewMemory, bump_seq, ensure_space, get_records, insert_memories, to_record, utc_naive,
)
from memory.recall.block import BLOCK_KINDS, render_block
from memory.recall.search import MemoryHit, Recaller, RecallSettings, confident
from memory.store.compact import BackgroundRewrite, attach as attach_rewrites
from memory.store.connection import Conn, Store
from memory.redaction import redact
from memory.text import content_hash, normalize, set_jieba_cache_dir, trim

log = logging.getLogger(__name__)


class MemoryEngine:
    """Everything the bot needs from memory, behind one object."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM | None, *, data_dir: Path | None = None,
                 recall_settings: RecallSettings | None = None, ingest_settings: IngestSettings | None = None,
                 clock: Callable[[], datetime] | None = None, on_ingested=None) -> None:
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.clock = clock or (lambda: datetime.now(UTC))
        self.data_dir = Path(data_dir) if data_dir is not None else None
        if data_dir is not None:
            set_jieba_cache_dir(Path(data_dir) / "cache")
        self.recaller = Recaller(store, embedder, recall_settings, clock=self.clock)
        self.worker = IngestWorker(store, embedder, llm, clock=self.clock, settings=ingest_settings, on_ingested=on_ingested)
        self.forget_hooks: list[ForgetHook] = []
        # What an erase reaches beyond memory's tables: the layers' tables (their rules) and, after
        # the transaction, their caches and files (hooks called with the erased spaces and their texts).
        self.erase_rules = EraseRules()
        self.erase_hooks: list[Callable[[Sequence[str], Sequence[str]], None]] = []
        attach_rewrites(store)                     # a rewrite a crash left undone is finished now
        self.rewrites = BackgroundRewrite(store)  # a forget's text leaves the file a little later

    @property
    def recall_settings(self) -> RecallSettings:
        return self.recaller.settings

    # --- spaces ----------------------------------------------------------------------------
    async def ensure_space(self, space_id: str, kind: str, name: str | None = None) -> None:
        await self.store.awrite(lambda c: ensure_space(c, space_id, kind, name, self.clock()))

    # --- recall ----------------------------------------------------------------------------
    async def search(self, query: str, space_ids: Sequence[str], *, limit: int | None = None,
                     kinds: Sequence[str] | None = None) -> list[MemoryHit]:
        return await self.recaller.asearch(query, space_ids, limit=limit, kinds=kinds)

    async def recall_block(self, query: str, space_ids: Sequence[str], *,
                           shared_spaces: Sequence[str] = ()) -> tuple[str, list[MemoryHit]]:
        """Auto-recall: the <memory-context> block ('' when nothing relevant) and its hits; hits of
        `shared_spaces` (the public space) are labelled as shared notes."""
        s = self.recaller.settings
        hits = await self.search(query, space_ids, limit=s.inject_items, kinds=BLOCK_KINDS)
        if not confident(hits, s.min_confidence):
            hits = []  # nothing in memory is about it: the agent is told so (prompts.NO_MEMORY_HINT)
        return render_block(hits, self.clock(), max_items=s.inject_items, max_tokens=s.inject_tokens,
                            fold=s.fold_overlap, shared_spaces=frozenset(shared_spaces)), hits

    # --- capture ---------------------------------------------------------------------------
    async def ingest_room(self) -> None:
        """Wait while memory is far behind (IngestWorker.room): a turn calls it before it starts."""
        await self.worker.room()

    async def capture(self, turn: CapturedTurn) -> bool:
        queued = await asyncio.to_thread(capture, self.store, turn)
        if queued:
            self.worker.notify()
        return queued

    # --- records ---------------------------------------------------------------------------
    async def get(self, ids: Sequence[str], space_ids: Sequence[str]) -> list[MemoryRecord]:
        return await self.store.aread(lambda c: get_records(c, ids, space_ids))

    async def timeline(self, memory_id: str, space_ids: Sequence[str], window: int = 3) -> list[MemoryRecord]:
        """The chunks around a memory in its session (for a fact: around its first source)."""

        def read(con: Conn) -> list[MemoryRecord]:
            row = con.execute(
                """SELECT coalesce((SELECT min(chunk_id) FROM fact_sources WHERE fact_id = m.id), m.id)
                   FROM memories m WHERE id = ? AND space_id IN (SELECT unnest(?))""",
                [memory_id, list(space_ids)]).fetchone()
            if not row:
                return []
            # The anchor too must be in a space the caller reads: a session id is a name, not a space.
            anchor = con.execute("SELECT space_id, session_id, created_at FROM memories WHERE id = ? "
                                 "AND space_id IN (SELECT unnest(?))", [row[0], list(space_ids)]).fetchone()
            if not anchor:
                return []
            space, session, at = anchor
            rows = con.execute(
                f"""(SELECT {RECORD_COLUMNS} FROM memories WHERE kind = 'chunk' AND space_id = $s
                        AND session_id IS NOT DISTINCT FROM $sess AND created_at < $at AND status <> 'deleted'
                        ORDER BY created_at DESC LIMIT $w)
                    UNION ALL
                    (SELECT {RECORD_COLUMNS} FROM memories WHERE kind = 'chunk' AND space_id = $s
                        AND session_id IS NOT DISTINCT FROM $sess AND created_at >= $at AND status <> 'deleted'
                        ORDER BY created_at LIMIT $w1)""",
                {"s": space, "sess": session, "at": at, "w": window, "w1": window + 1}).fetchall()
            return sorted((to_record(r) for r in rows), key=lambda r: r.created_at)

        return await self.store.aread(read)

    async def list(self, space_ids: Sequence[str], *, kinds: Sequence[str] = ("fact",), limit: int = 20,
                   offset: int = 0) -> list[MemoryRecord]:
        return await self.store.aread(lambda c: [to_record(r) for r in c.execute(
            f"""SELECT {RECORD_COLUMNS} FROM memories WHERE space_id IN (SELECT unnest(?)) AND kind IN (SELECT unnest(?))
                AND status = 'active' ORDER BY pinned DESC, created_at DESC LIMIT ? OFFSET ?""",
            [list(space_ids), list(kinds), limit, offset]).fetchall()])

    async def remember(self, text: str, space_id: str, *, pinned: bool = False, category: str = "about_you",
                       source: str = "explicit") -> MemoryRecord:
        """Store a fact the person asked us to keep (no LLM; an exact duplicate is re-used and pinned).

        Secrets are redacted first: "/remember my wifi password is X" keeps that there is one, not X.
        """
        text = normalize(redact(text))
        h = content_hash(text)
        vec = await asyncio.to_thread(self.embedder.embed_passages, [text])
        now = self.clock()

        def write(con: Conn) -> str:
            old = con.execute("SELECT id FROM memories WHERE space_id = ? AND kind = 'fact' AND status = 'active' AND content_hash = ?",
                              [space_id, h]).fetchone()
            if old:
                if pinned:
                    con.execute("UPDATE memories SET pinned = true, updated_at = ? WHERE id = ?", [utc_naive(now), old[0]])
                return old[0]
            return insert_memories(con, [NewMemory(space_id=space_id, kind="fact", text=text, title=trim(text, 120),
                                                   created_at=now, pinned=pinned, category=category, tags=(source,))], vec)[0]

        mid = await self.store.awrite(write)
        return (await self.get([mid], [space_id]))[0]

    async def remember_document(self, name: str, text: str, space_id: str, *, piece_chars: int = 1500,
                                session_id: str | None = None, turn_id: str | None = None) -> list[str]:
        """Keep a document the person sent as chunks of their memory, titled with its name (no
        LLM); returns the ids of the new rows (a piece already in the space is not stored twice)."""
        rows = document_rows(name, text, space_id=space_id, created_at=self.clock(), piece_chars=piece_chars,
                             session_id=session_id, turn_id=turn_id)
        if not rows:
            return []
        vectors = await asyncio.to_thread(self.embedder.embed_passages, [r.index_text for r in rows])

        def write(con: Conn) -> list[str]:
            known = {h for (h,) in con.execute(
                "SELECT content_hash FROM memories WHERE space_id = ? AND kind = 'chunk' AND status = 'active' "
                "AND content_hash IN (SELECT unnest(?::VARCHAR[]))", [space_id, [r.hash for r in rows]]).fetchall()}
            keep = [i for i, r in enumerate(rows) if r.hash not in known]
            return insert_memories(con, [rows[i] for i in keep], vectors[keep]) if keep else []

        return await self.store.awrite(write)

    async def forget(self, ids: Sequence[str], space_ids: Sequence[str]) -> ForgetResult:
        """Forget memories everywhere (rows, sources, echoes, queue, history, keyword index); tombstones stay.

        Pinned ones too: the person asked. The one path for /forget, the memory_forget tool and the CLI.
        """
        hooks = tuple(self.forget_hooks)
        result = await self.store.awrite(lambda con: forget_everywhere(con, ids, space_ids, self.clock(), hooks))
        if result.forgotten:
            self.rewrites.soon()
        return result

    async def erase_counts(self, space_ids: Sequence[str]) -> EraseCounts:
        """What an erase of the spaces would remove (facts, messages, tasks, skills, reminders)."""
        from memory.erase import counts

        got = await self.store.aread(lambda c: [counts(c, s) for s in space_ids])
        return EraseCounts(facts=sum(g.facts for g in got), messages=sum(g.messages for g in got),
                           tasks=sum(g.tasks for g in got), skills=sum(g.skills for g in got),
                           reminders=sum(g.reminders for g in got))

    async def erase(self, space_ids: Sequence[str]) -> EraseCounts:
        """Erase the spaces: every row of every table (memory/erase.py), their vectors, SKILL.md
        files and keyword postings, what the layers above registered, then the file rewritten at
        once so no word stays on disk. The one path for /forget everything, the CLI, the API and MCP."""
        import shutil

        from memory.erase import erase_spaces, said_texts
        from memory.store.compact import finish_pending
        from memory.store.vectors import cache_for
        from memory.tasks.skill_files import safe_component

        spaces = list(dict.fromkeys(space_ids))
        rules = self.erase_rules

        def write(con: Conn) -> tuple[EraseCounts, list[str]]:
            texts = said_texts(con, spaces)
            return erase_spaces(con, spaces, rules), texts

        done, texts = await self.store.awrite(write)
        await asyncio.to_thread(cache_for(self.store).refile, spaces, drop=True)
        if self.data_dir is not None:
            for s in spaces:
                await asyncio.to_thread(shutil.rmtree, self.data_dir / "skills" / safe_component(s), True)
        for hook in self.erase_hooks:
            hook(spaces, texts)
        await asyncio.to_thread(finish_pending, self.store)
        log.info("erased %d space(s): %s", len(spaces), ", ".join(f"{n} {t}" for t, n in done.rows.items()))
        return done

    def add_forget_hook(self, hook: ForgetHook) -> None:
        """Let a layer above scrub its own tables of forgotten text (in the forget's transaction)."""
        self.forget_hooks.append(hook)

    async def edit(self, memory_id: str, text: str, space_ids: Sequence[str]) -> MemoryRecord | None:
        """Replace an active fact's text: a new fact takes its place (same space, pin and category)
        and the old one is archived with `superseded_by` (history kept). None when not found.
        Secrets are redacted, as in `remember`."""
        text = normalize(redact(text))
        vec = await asyncio.to_thread(self.embedder.embed_passages, [text])
        now = self.clock()

        def write(con: Conn) -> str | None:
            row = con.execute(
                """SELECT space_id, pinned, category FROM memories
                   WHERE id = ? AND space_id IN (SELECT unnest(?)) AND status = 'active' AND kind = 'fact'""",
                [memory_id, list(space_ids)]).fetchone()
            if row is None:
                return None
            space_id, pinned, category = row
            [new] = insert_memories(con, [NewMemory(space_id=space_id, kind="fact", text=text, title=trim(text, 120),
                                                    created_at=now, pinned=pinned, category=category,
                                                    tags=("edited",))], vec)
            con.execute("UPDATE memories SET status = 'archived', superseded_by = ?, pinned = false, updated_at = ? "
                        "WHERE id = ?", [new, utc_naive(now), memory_id])
            bump_seq(con, [memory_id])
            return new

        new_id = await self.store.awrite(write)
        return (await self.get([new_id], space_ids))[0] if new_id else None

    async def set_pinned(self, memory_id: str, space_ids: Sequence[str], pinned: bool) -> bool:
        def write(con: Conn) -> bool:
            row = con.execute("SELECT id FROM memories WHERE id = ? AND space_id IN (SELECT unnest(?)) AND status = 'active'",
                              [memory_id, list(space_ids)]).fetchone()
            if row:
                con.execute("UPDATE memories SET pinned = ?, updated_at = ? WHERE id = ?", [pinned, utc_naive(self.clock()), memory_id])
            return row is not None

        return await self.store.awrite(write)

    # --- export / import -------------------------------------------------------------------
    def export_rows(self, space_ids: Sequence[str], *, include_inactive: bool = False) -> Iterator[dict]:
        """Live memories of the given spaces as JSON-ready dicts (facts, chunks, tasks, skills)."""
        status = "" if include_inactive else "AND status = 'active'"
        rows = self.store.read(lambda c: c.execute(
            f"""SELECT id, space_id, kind, role, speaker, title, text, category, tags, pinned, status, session_id,
                       created_at, (SELECT array_agg(chunk_id) FROM fact_sources WHERE fact_id = m.id) AS sources
                FROM memories m WHERE space_id IN (SELECT unnest(?)) {status} ORDER BY created_at, id""",
            [list(space_ids)]).fetchall())
        keys = ("id", "space_id", "kind", "role", "speaker", "title", "text", "category", "tags", "pinned", "status",
                "session_id", "created_at", "sources")
        for r in rows:
            d = dict(zip(keys, r))
            d["created_at"] = d["created_at"].isoformat()
            d["tags"] = list(d["tags"] or [])
            d["sources"] = list(d["sources"] or [])
            yield d

    def export_jsonl(self, space_ids: Sequence[str]) -> bytes:
        return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in self.export_rows(space_ids)).encode("utf-8")

    def import_rows(self, rows: Iterable[dict], space_id: str | None = None, batch: int = 64,
                    progress: Callable[[int], None] | None = None):
        """Import exported rows (re-embedded here; ids kept, so a re-run adds nothing). Returns the
        ImportReport: rows added, already present, and the id each row has here."""
        from memory.portable import ExportRow, import_rows
        from memory.store.vectors import cache_for

        parsed = ((n, ExportRow.model_validate(d)) for n, d in enumerate(rows, start=1))
        spaces: set[str] = set()
        report = import_rows(self.store, self.embedder.embed_passages, parsed,
                             _noting(lambda r: space_id or r.space_id, spaces), batch=batch, progress=progress)
        cache_for(self.store).warm(sorted(spaces))  # a big import's vector file, before its first question
        return report

    def import_lines(self, lines: Iterable[bytes | str], space_for: Callable[[object], str], *, batch: int = 64,
                     progress: Callable[[int], None] | None = None, on_bad: Callable[[object], None] | None = None):
        """Import an export file's lines; bad lines are reported through `on_bad` and skipped."""
        from memory.portable import BadLine, ImportReport, import_rows, parse_lines
        from memory.store.vectors import cache_for

        bad: list[BadLine] = []

        def good():
            for n, item in parse_lines(lines):
                if isinstance(item, BadLine):
                    bad.append(item)
                    if on_bad:
                        on_bad(item)
                    if progress:
                        progress(1)
                else:
                    yield n, item

        spaces: set[str] = set()
        report: ImportReport = import_rows(self.store, self.embedder.embed_passages, good(),
                                           _noting(space_for, spaces), batch=batch, progress=progress)
        cache_for(self.store).warm(sorted(spaces))
        report.bad = bad
        return report

    # --- maintenance -----------------------------------------------------------------------
    def rebuild_fts(self) -> int:
        return rebuild_index(self.store)

    def fresh_rows(self) -> int:
        return self.store.read(fresh_count)

    def reembed(self, embedder: Embedder, *, batch: int = 64, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every memory with another model (the dimension may change). Returns rows done.

        Crash-safe and resumable: vectors are built beside the old ones (memory/store/reembed.py)."""
        from memory.store import reembed as side

        total = self.store.read(lambda c: c.execute("SELECT count(*) FROM memories").fetchone()[0])
        dim = embedder.dim
        kept = side.prepare(self.store, embedder.name, dim)
        if progress and kept:
            progress(kept)
        side.build(self.store, embedder.embed_passages, dim, batch=batch, progress=progress)
        done = side.switch(self.store, embedder.name, dim)
        from memory.store.vectors import cache_for

        cache_for(self.store).clear()  # cached vectors belong to the old model
        self.embedder = embedder
        self.recaller.embedder = embedder
        self.worker.embedder = embedder
        log.info("re-embedded %d of %d memories with %s", done, total, embedder.name)
        return done


def _noting(space_for: Callable[[Any], str], spaces: set[str]) -> Callable[[Any], str]:
    """`space_for` that also notes every space it gives (the spaces an import wrote to)."""
    def noted(row: Any) -> str:
        space = space_for(row)
        spaces.add(space)
        return space
    return noted
