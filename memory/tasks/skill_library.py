"""SkillLibrary: find, read, count and publish the skills of the allowed spaces.

Ranking is `related_scores`: 0.7 x cosine + 0.3 x BM25 over name and description. Every query
carries the allowed spaces in SQL. SkillEvolver (skills.py) builds on this to write new versions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from memory.embed import Embedder
from memory.errors import MemgateError
from memory.store.connection import Conn, Store, vector_literal
from memory.store.dialect import dialect_of
from memory.store.keywords import keyword_search
from memory.store.postings_cache import postings_for
from memory.store.rows import NewMemory, bump_seq, ensure_space, insert_memories, new_id, utc_naive
from memory.store.vectors import cache_for
from memory.tasks.rules import SkillThresholds
from memory.tasks.skill_files import SkillDoc, index_text, parse_skill_md, skill_text, write_skill_file
from memory.text import content_hash, query_terms, search_text, trim

log = logging.getLogger(__name__)


class SkillNotFound(MemgateError):
    """No skill of that name or id is visible in the given spaces."""


@dataclass(frozen=True)
class SkillSettings:
    vector_weight: float = 0.7
    keyword_weight: float = 0.3
    candidates: int = 10
    candidate_chars: int = 220        # per skill shown to the decision call
    task_chars: int = 3000
    # search() floor. Calibrated for multilingual-e5-small, whose cosines sit high for everything:
    # related skills score >= 0.62 even across languages, unrelated ones <= 0.57 (no keyword hit).
    # Set per embedding provider; the evolver's candidates have no floor (the LLM decides).
    search_min_score: float = 0.6
    decide_max_tokens: int = 120
    write_max_tokens: int = 1200
    rules: SkillThresholds = field(default_factory=SkillThresholds)


@dataclass(frozen=True, slots=True)
class SkillView:
    """A skill as tools and chat commands show it; `content` is the latest SKILL.md."""

    id: str
    space_id: str
    name: str
    description: str
    version: int
    usage_count: int
    content: str
    created_at: datetime
    updated_at: datetime
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class SkillVersionView:
    skill_id: str
    version: int
    changelog: str | None
    source_task_id: str | None
    created_at: datetime
    content: str


def related_scores(vector: Sequence[tuple[str, float]], keyword: Sequence[tuple[str, float]],
                   vector_weight: float = 0.7, keyword_weight: float = 0.3) -> dict[str, float]:
    """score(d) = vector_weight * cosine(d) + keyword_weight * bm25(d) / max bm25 (0 when absent)."""
    top = max((s for _, s in keyword), default=0.0) or 1.0
    scores = {d: vector_weight * s for d, s in vector}
    for d, s in keyword:
        scores[d] = scores.get(d, 0.0) + keyword_weight * s / top
    return scores


_SKILL_SELECT = """
SELECT s.id, s.space_id, s.name, s.description, s.version, s.usage_count, v.content, s.created_at, s.updated_at
FROM skills s JOIN skill_versions v ON v.skill_id = s.id AND v.version = s.version
"""


class SkillLibrary:
    """The read side of skills, and publishing."""

    def __init__(self, store: Store, embedder: Embedder, data_dir: Path, *,
                 clock: Callable[[], datetime], settings: SkillSettings = SkillSettings()) -> None:
        self.store = store
        self.embedder = embedder
        self.data_dir = Path(data_dir)
        self.settings = settings
        self._clock = clock

    # --- reads -------------------------------------------------------------------------------
    async def search(self, query: str, space_ids: Sequence[str], limit: int = 5) -> list[SkillView]:
        """Skills of the allowed spaces ranked by 0.7 x cosine + 0.3 x BM25 over name and description,
        above `settings.search_min_score` (does not count usage: call count_usage for what is used).
        The query "*" lists them all, as `list_skills` does."""
        if query.strip() == "*":
            return await self.list_skills(space_ids, limit)
        if not query.strip() or not space_ids:
            return []
        return await self._ranked(query, list(space_ids), limit, self.settings.search_min_score)

    async def list_skills(self, space_ids: Sequence[str], limit: int = 20) -> list[SkillView]:
        """Every skill of the allowed spaces, most used first, then most recently changed."""
        if not space_ids:
            return []
        rows = await self.store.aread(lambda c: c.execute(
            _SKILL_SELECT + " WHERE s.space_id IN (SELECT unnest(?)) ORDER BY s.usage_count DESC, s.updated_at DESC, "
            "s.name LIMIT ?", [list(space_ids), limit]).fetchall())
        return [SkillView(*r) for r in rows]

    async def get(self, name_or_id: str, space_ids: Sequence[str]) -> SkillView | None:
        """A skill by id or name (the first listed space wins a name clash); counts one use."""
        skill = await self._resolve(name_or_id, space_ids)
        if skill is None:
            return None
        await self.count_usage([skill.id])
        return replace(skill, usage_count=skill.usage_count + 1)

    async def history(self, name_or_id: str, space_ids: Sequence[str]) -> list[SkillVersionView]:
        """Every version of a visible skill, oldest first."""
        skill = await self._resolve(name_or_id, space_ids)
        if skill is None:
            return []
        rows = await self.store.aread(lambda c: c.execute(
            "SELECT skill_id, version, changelog, source_task_id, created_at, content FROM skill_versions "
            "WHERE skill_id = ? ORDER BY version", [skill.id]).fetchall())
        return [SkillVersionView(*r) for r in rows]

    async def count_usage(self, skill_ids: Sequence[str]) -> None:
        """Count one use of each skill (recall injected it, or a tool read it)."""
        if skill_ids:
            await self.store.awrite(lambda c: c.execute(
                "UPDATE skills SET usage_count = usage_count + 1 WHERE id IN (SELECT unnest(?))", [list(skill_ids)]))

    async def publish(self, name_or_id: str, space_id: str, public_space_id: str) -> SkillView:
        """Copy a skill of `space_id` (with its versions) into the public space; republishing adds a version."""
        skill = await self._resolve(name_or_id, [space_id])
        if skill is None:
            raise SkillNotFound(f"no skill {name_or_id!r} in this space")
        existing = await self._resolve(skill.name, [public_space_id])
        now = utc_naive(self._clock())
        if existing is not None:
            if existing.content == skill.content:
                return existing
            doc = parse_skill_md(skill.content)
            vector = await asyncio.to_thread(self.embedder.embed_passages, [index_text(doc)])

            def update(c: Conn) -> None:
                c.execute("UPDATE skills SET version = version + 1, description = ?, updated_at = ? WHERE id = ?",
                          [skill.description, now, existing.id])
                c.execute("INSERT INTO skill_versions VALUES (?, ?, ?, ?, ?, ?)",
                          [existing.id, existing.version + 1, skill.content,
                           f"Published again from version {skill.version}", None, now])
                self._update_row(c, existing.id, doc, vector[0], now)

            await self.store.awrite(update)
            target = existing.id
        else:
            versions = await self.store.aread(lambda c: c.execute(
                "SELECT version, content, changelog, source_task_id, created_at FROM skill_versions WHERE skill_id = ? "
                "ORDER BY version", [skill.id]).fetchall())
            doc = parse_skill_md(skill.content)
            vector = await asyncio.to_thread(self.embedder.embed_passages, [index_text(doc)])
            target = new_id("s")

            def copy(c: Conn) -> None:
                ensure_space(c, public_space_id, "public", None, now)
                self._insert_skill(c, target, public_space_id, doc, vector, now, versions)

            await self.store.awrite(copy)
        await self._write_file(public_space_id, skill.name, skill.content)
        published = await self._resolve(target, [public_space_id])
        assert published is not None
        log.info("skill %s published to %s as %s", skill.id, public_space_id, target)
        return published

    # --- internals ---------------------------------------------------------------------------
    async def _resolve(self, name_or_id: str, space_ids: Sequence[str]) -> SkillView | None:
        if not space_ids:
            return None
        rows = await self.store.aread(lambda c: c.execute(
            _SKILL_SELECT + " WHERE (s.id = ? OR s.name = ?) AND s.space_id IN (SELECT unnest(?))",
            [name_or_id, name_or_id, list(space_ids)]).fetchall())
        if not rows:
            return None
        order = {sp: i for i, sp in enumerate(space_ids)}
        rows.sort(key=lambda r: (r[0] != name_or_id, order.get(r[1], len(order))))
        return SkillView(*rows[0])

    async def _ranked(self, query: str, space_ids: list[str], limit: int, min_score: float) -> list[SkillView]:
        # The question as recall embeds it (not trimmed, which joins its lines): a turn's skill
        # search then takes recall's vector from the embedder's query cache instead of a second
        # embedding call (the embedder reads one piece of a query anyway).
        qvec = await asyncio.to_thread(self.embedder.embed_query, query)
        terms = query_terms(trim(query, 600))
        n = max(limit * 5, 50)

        def read(c: Conn) -> list[SkillView]:
            # The in-memory vectors and postings recall keeps (the same rows as the SQL scans,
            # which read every vector of the spaces' row groups: ~30 ms at 10k memories).
            vec = cache_for(self.store).candidates(c, qvec, space_ids, n, ["skill"])
            kw = keyword_search(c, terms, space_ids, n, ["skill"], cache=postings_for(self.store))[0]
            scores = related_scores(vec, kw, self.settings.vector_weight, self.settings.keyword_weight)
            if not scores:
                return []
            rows = c.execute(_SKILL_SELECT + " WHERE s.id IN (SELECT unnest(?))", [list(scores)]).fetchall()
            views = [SkillView(*r, score=round(scores[r[0]], 4)) for r in rows if scores[r[0]] >= min_score]
            return sorted(views, key=lambda v: (-v.score, v.name))[:limit]

        return await self.store.aread(read)

    def _insert_skill(self, c: Conn, skill_id: str, space_id: str, doc: SkillDoc, vector, now: datetime,
                      versions: Sequence[tuple]) -> None:
        latest = max(v[0] for v in versions)
        c.execute("INSERT INTO skills (id, space_id, name, description, version, usage_count, created_at, updated_at) "
                  "VALUES (?, ?, ?, ?, ?, 0, ?, ?)", [skill_id, space_id, doc.name, doc.description, latest, now, now])
        for v in versions:
            c.execute("INSERT INTO skill_versions VALUES (?, ?, ?, ?, ?, ?)", [skill_id, *v])
        insert_memories(c, [NewMemory(space_id=space_id, kind="skill", text=skill_text(doc), title=doc.name,
                                      created_at=now, id=skill_id, index_text=index_text(doc))], vector)

    @staticmethod
    def _update_row(c: Conn, skill_id: str, doc: SkillDoc, vector, now: datetime) -> None:
        c.execute(
            f"UPDATE memories SET text = ?, search_text = ?, content_hash = ?, updated_at = ?, "
            f"embedding = {dialect_of(c).vector('?', len(vector))} WHERE id = ?",
            [skill_text(doc), search_text(index_text(doc)), content_hash(skill_text(doc)), now,
             vector_literal(vector), skill_id])
        bump_seq(c, [skill_id])

    async def _write_file(self, space_id: str, name: str, content: str) -> None:
        # The database holds every version; a file that cannot be written is logged, not fatal.
        try:
            await asyncio.to_thread(write_skill_file, self.data_dir, space_id, name, content)
        except OSError:
            log.warning("could not write SKILL.md of %s in %s", name, space_id, exc_info=True)
