"""SkillEvolver: distil completed tasks into skills (SKILL.md) that improve with use.

Per completed task (DESIGN section 6), at most two LLM calls:
1. rule filter (no LLM): >= 6 chunks, summary >= 100 characters, user and assistant present;
2. related skills of the task's space by 0.7 x cosine + 0.3 x BM25 (over name and description),
   the top 10 shown to the LLM with small numbers; one call names the same-domain skill (or
   none) and says whether the task improves it, or, with none, whether it is reusable;
3. only then one call writes SKILL.md: the next version of the matched skill (kept only when
   the model confirms a real improvement, with a changelog line), or a new skill.

Every version stays in `skill_versions`; the latest is also the file
`<data>/skills/<space>/<name>/SKILL.md`. Skills are private to their space; `publish` copies one
into the public space. A task whose LLM call failed stays unchecked and is retried next run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from memory.embed import Embedder
from memory.errors import MemgateError
from memory.store.keywords import keyword_candidates
from memory.llm import LLM
from memory.store.rows import NewMemory, bump_seq, ensure_space, insert_memories, new_id, utc_naive
from memory.prompts import (
    SKILL_CREATE_SYSTEM,
    SKILL_DECIDE_SYSTEM,
    SKILL_DECIDE_USER,
    SKILL_UPGRADE_SYSTEM,
    SKILL_UPGRADE_USER,
)
from memory.tasks.skill_files import (
    SkillDoc,
    clean_doc,
    index_text,
    kebab_name,
    parse_skill_md,
    render_skill_md,
    skill_text,
    unique_name,
    write_skill_file,
)
from memory.store.connection import Conn, Store, vector_literal
from memory.tasks.rules import SkillThresholds, skill_reject_reason, user_language
from memory.tasks.processor import LANGUAGE_HINT, cut_text
from memory.text import content_hash, query_terms, redact, search_text, trim
from memory.store.vectors import vector_candidates

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


OutcomeAction = Literal["created", "upgraded", "unchanged", "not_reusable", "filtered", "failed"]


@dataclass(frozen=True, slots=True)
class SkillOutcome:
    """What one completed task did to the skills (`reason` names the rule or the model's why)."""

    task_id: str
    action: OutcomeAction
    skill_id: str | None = None
    reason: str = ""


class DecideAnswer(BaseModel):
    match: int | None = None
    upgrade: bool = False
    reusable: bool = False
    reason: str = ""


class SkillAnswer(BaseModel):
    improved: bool = True
    changelog: str = ""
    name: str = ""
    description: str = ""
    steps: list[str] = []
    pitfalls: list[str] = []
    commands: list[str] = []
    prerequisites: list[str] = []


def related_scores(vector: Sequence[tuple[str, float]], keyword: Sequence[tuple[str, float]],
                   vector_weight: float = 0.7, keyword_weight: float = 0.3) -> dict[str, float]:
    """score(d) = vector_weight * cosine(d) + keyword_weight * bm25(d) / max bm25 (0 when absent)."""
    top = max((s for _, s in keyword), default=0.0) or 1.0
    scores = {d: vector_weight * s for d, s in vector}
    for d, s in keyword:
        scores[d] = scores.get(d, 0.0) + keyword_weight * s / top
    return scores


def _doc_from(ans: SkillAnswer, name: str, fallback_description: str = "") -> SkillDoc:
    return clean_doc(SkillDoc(
        name=name,
        description=redact(ans.description or fallback_description),
        steps=tuple(redact(x) for x in ans.steps),
        pitfalls=tuple(redact(x) for x in ans.pitfalls),
        commands=tuple(redact(x) for x in ans.commands),
        prerequisites=tuple(redact(x) for x in ans.prerequisites),
    ))


def candidate_line(skill: SkillView, limit: int) -> str:
    """A candidate as the decision call sees it: description and steps, in `limit` characters."""
    return trim(f"{skill.description} | steps: {'; '.join(parse_skill_md(skill.content).steps)}", limit)


_SKILL_SELECT = """
SELECT s.id, s.space_id, s.name, s.description, s.version, s.usage_count, v.content, s.created_at, s.updated_at
FROM skills s JOIN skill_versions v ON v.skill_id = s.id AND v.version = s.version
"""


class SkillEvolver:
    """Creates and upgrades skills from completed tasks; finds, reads and publishes them."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM, data_dir: Path, *,
                 clock: Callable[[], datetime], settings: SkillSettings = SkillSettings()) -> None:
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.data_dir = Path(data_dir)
        self.settings = settings
        self._clock = clock
        self._lock = asyncio.Lock()

    # --- evolution ---------------------------------------------------------------------------
    async def evolve_pending(self) -> int:
        """Check every completed task not yet checked; returns how many were checked."""
        async with self._lock:
            ids = await self.store.aread(lambda c: [r[0] for r in c.execute(
                "SELECT id FROM tasks WHERE status = 'completed' AND NOT skill_checked "
                "ORDER BY coalesce(closed_at, last_at), id").fetchall()])
            done = 0
            for task_id in ids:
                outcome = await self._evolve(task_id)
                done += outcome.action != "failed"
            return done

    async def evolve_task(self, task_id: str) -> SkillOutcome:
        """Run the skill pipeline on one completed task (marks it checked unless an LLM call failed)."""
        async with self._lock:
            return await self._evolve(task_id)

    async def _evolve(self, task_id: str) -> SkillOutcome:
        def load(c: Conn):
            row = c.execute("SELECT space_id, title, summary, chunk_count FROM tasks WHERE id = ?", [task_id]).fetchone()
            roles = [r[0] for r in c.execute(
                "SELECT DISTINCT role FROM memories WHERE task_id = ? AND kind = 'chunk'", [task_id]).fetchall()]
            return row, roles

        row, roles = await self.store.aread(load)
        if row is None:
            return SkillOutcome(task_id, "failed", reason="no such task")
        space_id, title, summary, chunk_count = row
        reason = skill_reject_reason(chunk_count, summary, roles, self.settings.rules)
        if reason is not None:
            await self._mark_checked(task_id)
            return self._log(SkillOutcome(task_id, "filtered", reason=reason))
        s = self.settings
        task_text = cut_text(summary, s.task_chars)
        language = LANGUAGE_HINT[user_language([summary])]
        try:
            candidates = await self._related(space_id, f"{title or ''}\n{summary}")
            listing = "\n".join(f"{i}. {k.name}: {candidate_line(k, s.candidate_chars)}"
                                 for i, k in enumerate(candidates, 1)) or "(none)"
            decision = await self.llm.complete_json(
                SKILL_DECIDE_SYSTEM, SKILL_DECIDE_USER.format(task=task_text, skills=listing), DecideAnswer,
                purpose="skill_decide", max_tokens=s.decide_max_tokens)
            match = candidates[decision.match - 1] if decision.match and 0 < decision.match <= len(candidates) else None
            if match is not None:
                if not decision.upgrade:
                    await self._mark_checked(task_id)
                    return self._log(SkillOutcome(task_id, "unchanged", match.id, decision.reason))
                return self._log(await self._upgrade(task_id, match, task_text, language))
            if not decision.reusable:
                await self._mark_checked(task_id)
                return self._log(SkillOutcome(task_id, "not_reusable", reason=decision.reason))
            return self._log(await self._create(task_id, space_id, title or "", task_text, language))
        except Exception as exc:  # retried on the next run; the reply path never waits on this
            log.warning("skill evolution of task %s failed (%s); will retry", task_id, type(exc).__name__)
            return SkillOutcome(task_id, "failed", reason=type(exc).__name__)

    @staticmethod
    def _log(outcome: SkillOutcome) -> SkillOutcome:
        log.info("task %s -> skill %s %s (%s)", outcome.task_id, outcome.skill_id or "-", outcome.action, outcome.reason)
        return outcome

    async def _upgrade(self, task_id: str, skill: SkillView, task_text: str, language: str) -> SkillOutcome:
        ans = await self.llm.complete_json(
            SKILL_UPGRADE_SYSTEM.format(language=language), SKILL_UPGRADE_USER.format(skill=skill.content, task=task_text),
            SkillAnswer, purpose="skill_write", max_tokens=self.settings.write_max_tokens)
        doc = _doc_from(ans, skill.name, skill.description)
        content = render_skill_md(doc)
        if not ans.improved or not doc.steps or content == skill.content:
            await self._mark_checked(task_id)
            return SkillOutcome(task_id, "unchanged", skill.id, "no real improvement")
        version = skill.version + 1
        changelog = redact(trim(ans.changelog, 300)) or "Updated from a newer task"
        vector = await asyncio.to_thread(self.embedder.embed_passages, [index_text(doc)])
        now = utc_naive(self._clock())

        def write(c: Conn) -> None:
            c.execute("UPDATE skills SET version = ?, description = ?, updated_at = ? WHERE id = ?",
                      [version, doc.description, now, skill.id])
            c.execute("INSERT INTO skill_versions VALUES (?, ?, ?, ?, ?, ?)",
                      [skill.id, version, content, changelog, task_id, now])
            self._update_row(c, skill.id, doc, vector[0], now)
            self._check(c, task_id)

        await self.store.awrite(write)
        await self._write_file(skill.space_id, skill.name, content)
        return SkillOutcome(task_id, "upgraded", skill.id, changelog)

    async def _create(self, task_id: str, space_id: str, title: str, task_text: str, language: str) -> SkillOutcome:
        ans = await self.llm.complete_json(
            SKILL_CREATE_SYSTEM.format(language=language), task_text, SkillAnswer,
            purpose="skill_write", max_tokens=self.settings.write_max_tokens)
        if not ans.steps:
            await self._mark_checked(task_id)
            return SkillOutcome(task_id, "not_reusable", reason="no steps written")
        # A model may answer a name in Chinese: the ASCII name then comes from the title, or is generic.
        base = kebab_name(ans.name, "") or kebab_name(title, "") or "skill"
        taken = await self.store.aread(lambda c: {r[0] for r in c.execute(
            "SELECT name FROM skills WHERE space_id = ?", [space_id]).fetchall()})
        name = unique_name(base, taken)
        doc = _doc_from(ans, name, title)
        content = render_skill_md(doc)
        skill_id = new_id("s")
        vector = await asyncio.to_thread(self.embedder.embed_passages, [index_text(doc)])
        now = utc_naive(self._clock())

        def write(c: Conn) -> None:
            self._insert_skill(c, skill_id, space_id, doc, vector, now,
                               [(1, content, f"Created from task {task_id}", task_id, now)])
            self._check(c, task_id)

        await self.store.awrite(write)
        await self._write_file(space_id, name, content)
        return SkillOutcome(task_id, "created", skill_id, name)

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

    async def _related(self, space_id: str, query: str) -> list[SkillView]:
        return await self._ranked(query, [space_id], self.settings.candidates, 0.0)

    async def _ranked(self, query: str, space_ids: list[str], limit: int, min_score: float) -> list[SkillView]:
        qvec = await asyncio.to_thread(self.embedder.embed_query, trim(query, 1000))
        terms = query_terms(trim(query, 600))
        n = max(limit * 5, 50)

        def read(c: Conn) -> list[SkillView]:
            vec = vector_candidates(c, qvec, space_ids, n, ["skill"])
            kw = keyword_candidates(c, terms, space_ids, n, ["skill"])
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
            f"embedding = ?::VARCHAR::FLOAT[{len(vector)}] WHERE id = ?",
            [skill_text(doc), search_text(index_text(doc)), content_hash(skill_text(doc)), now,
             vector_literal(vector), skill_id])
        bump_seq(c, [skill_id])

    async def _write_file(self, space_id: str, name: str, content: str) -> None:
        # The database holds every version; a file that cannot be written is logged, not fatal.
        try:
            await asyncio.to_thread(write_skill_file, self.data_dir, space_id, name, content)
        except OSError:
            log.warning("could not write SKILL.md of %s in %s", name, space_id, exc_info=True)

    @staticmethod
    def _check(c: Conn, task_id: str) -> None:
        c.execute("UPDATE tasks SET skill_checked = true WHERE id = ?", [task_id])

    async def _mark_checked(self, task_id: str) -> None:
        await self.store.awrite(lambda c: self._check(c, task_id))
