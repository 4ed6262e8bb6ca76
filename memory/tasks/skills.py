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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from memory.embed import Embedder
from memory.llm import LLM
from memory.llm_json import complete_json
from memory.store.rows import new_id, utc_naive
from memory.prompts import (
    SKILL_CREATE_SYSTEM,
    SKILL_DECIDE_SYSTEM,
    SKILL_DECIDE_USER,
    SKILL_UPGRADE_SYSTEM,
    SKILL_UPGRADE_USER,
)
from memory.tasks.skill_library import (
    SkillLibrary,
    SkillSettings,
    SkillView,
)
from memory.tasks.skill_files import (
    SkillDoc,
    clean_doc,
    index_text,
    kebab_name,
    parse_skill_md,
    render_skill_md,
    unique_name,
)
from memory.store.connection import Conn, Store
from memory.tasks.rules import skill_reject_reason, user_language
from memory.tasks.summary import LANGUAGE_HINT, cut_text
from memory.redaction import redact
from memory.text import trim

log = logging.getLogger(__name__)


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


class SkillEvolver(SkillLibrary):
    """Creates and upgrades skills from completed tasks (finding and reading them: SkillLibrary)."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM, data_dir: Path, *,
                 clock: Callable[[], datetime], settings: SkillSettings = SkillSettings()) -> None:
        super().__init__(store, embedder, data_dir, clock=clock, settings=settings)
        self.llm = llm
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
            decision = await complete_json(self.llm,
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
            log.warning("skill evolution of task %s failed (%s: %s); will retry", task_id, type(exc).__name__, str(exc)[:300])
            return SkillOutcome(task_id, "failed", reason=type(exc).__name__)

    @staticmethod
    def _log(outcome: SkillOutcome) -> SkillOutcome:
        log.info("task %s -> skill %s %s (%s)", outcome.task_id, outcome.skill_id or "-", outcome.action, outcome.reason)
        return outcome

    async def _upgrade(self, task_id: str, skill: SkillView, task_text: str, language: str) -> SkillOutcome:
        ans = await complete_json(self.llm,
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
        ans = await complete_json(self.llm,
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

    async def _related(self, space_id: str, query: str) -> list[SkillView]:
        return await self._ranked(query, [space_id], self.settings.candidates, 0.0)

    @staticmethod
    def _check(c: Conn, task_id: str) -> None:
        c.execute("UPDATE tasks SET skill_checked = true WHERE id = ?", [task_id])

    async def _mark_checked(self, task_id: str) -> None:
        await self.store.awrite(lambda c: self._check(c, task_id))
