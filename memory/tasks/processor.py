"""TaskProcessor: cut a space's chunks into tasks, close them, and summarise the ones worth it.

Flow (DESIGN section 6):
- `assign(space)` runs after each ingested turn: the unassigned chunks, oldest first, are grouped
  into turns and each turn joins the open task or starts a new one (rules in rules.py). When the
  rules cannot tell, the verdict the ingest call stored for the turn decides (boundary.py); only
  without one (the turn went raw) is the LLM asked here, one small call per decision.
- A task closes when the next one starts, or from the scheduler (`close_idle`) once idle 2 h.
  Closing applies the skip rules; a kept task gets one LLM summary (its text: summary.py),
  stored in `tasks.summary` and as a `memories` row of kind 'task' with the task's id, so recall
  finds it.
- A closed task whose summary failed keeps status 'open' with `closed_at` set, and the next
  `close_idle` retries it: the LLM being down delays a summary, it never loses one.

Secrets are redacted before any text reaches the LLM.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, field_validator

from memory.embed import Embedder
from memory.llm import LLM
from memory.llm_json import complete_json
from memory.store.rows import NewMemory, insert_memories, new_id, utc_naive
from memory.prompts import (
    TASK_BOUNDARY_RECHECK_SYSTEM,
    TASK_BOUNDARY_SYSTEM,
    TASK_BOUNDARY_USER,
    TASK_SUMMARY_SYSTEM,
    TASK_SUMMARY_USER,
)
from memory.store.connection import Conn, Store
from memory.tasks.boundary import fold_step, forget_verdicts, stored_verdicts
from memory.tasks.rules import (
    ChunkInfo,
    OpenTask,
    Step,
    TaskDigest,
    Turn,
    Verdict,
    boundary_step,
    group_turns,
    resolve_verdict,
    skip_reason,
    user_language,
)
from memory.tasks.settings import TaskSettings
from memory.tasks.summary import LANGUAGE_HINT, SummaryAnswer, cut_text, format_chat, render_summary
from memory.redaction import redact
from memory.text import trim

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as the tools and chat commands show it."""

    id: str
    space_id: str
    session_id: str | None
    status: str
    skip_reason: str | None
    title: str | None
    summary: str | None
    chunk_count: int
    started_at: datetime
    last_at: datetime
    closed_at: datetime | None
    first_user_text: str | None = None


_VIEW_COLUMNS = ("id, space_id, session_id, status, skip_reason, title, summary, chunk_count, started_at, "
                 "last_at, closed_at, first_user_text")


class BoundaryAnswer(BaseModel):
    verdict: str
    confidence: float = 0.5

    @field_validator("verdict")
    @classmethod
    def _upper(cls, v: str) -> str:
        v = v.strip().upper()
        if v not in ("SAME", "NEW"):
            raise ValueError("verdict must be SAME or NEW")
        return v


def _turn_lines(turns: Sequence[Turn], limit: int) -> str:
    return "\n".join(
        f"{c.role}: {trim(redact(c.text), limit)}" for t in turns for c in t.chunks if c.role != "tool"
    )


@dataclass
class _Open:
    """The open task while `assign` walks the new turns."""

    id: str
    space_id: str
    session_id: str | None
    last_at: datetime
    first_user_text: str | None
    recent: deque[Turn]

    def rules_view(self) -> OpenTask:
        return OpenTask(self.session_id, self.last_at, self.first_user_text is not None)


def _chunk(row: tuple) -> ChunkInfo:
    return ChunkInfo(id=row[0], role=row[1] or "assistant", text=row[2], created_at=row[3], session_id=row[4],
                     turn_id=row[5])


_CHUNK_COLUMNS = "id, role, text, created_at, session_id, turn_id"
FIRST_USER_CHARS = 2000  # what the boundary judge sees of it is shorter still


class TaskProcessor:
    """Assigns chunks to tasks, closes idle tasks and writes task summaries."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM, *, clock: Callable[[], datetime],
                 settings: TaskSettings = TaskSettings()) -> None:
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.settings = settings
        self._clock = clock
        # One lock per space: ingest (assign) and the scheduler (close_idle) never interleave
        # on the same space's open task.
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, space_id: str) -> asyncio.Lock:
        return self._locks.setdefault(space_id, asyncio.Lock())

    # --- public API ------------------------------------------------------------------------
    async def assign(self, space_id: str) -> None:
        """Assign the space's unassigned chunks (oldest first) to tasks, turn by turn."""
        async with self._lock(space_id):
            await self._assign_locked(space_id)

    async def close_idle(self, now: datetime | None = None) -> int:
        """Close tasks idle longer than the gap (and retry pending summaries); returns how many closed."""
        now = utc_naive(now or self._clock())
        cutoff = now - self.settings.idle_gap
        spaces = await self.store.aread(lambda c: [r[0] for r in c.execute(
            "SELECT DISTINCT space_id FROM tasks WHERE status = 'open' AND (closed_at IS NOT NULL OR last_at < ?) "
            "ORDER BY space_id", [cutoff]).fetchall()])
        closed = 0
        for space in spaces:
            async with self._lock(space):
                # Chunks still waiting for assignment may belong to the task about to close.
                await self._assign_locked(space)
                ids = await self.store.aread(lambda c, space=space: [r[0] for r in c.execute(
                    "SELECT id FROM tasks WHERE space_id = ? AND status = 'open' "
                    "AND (closed_at IS NOT NULL OR last_at < ?) ORDER BY last_at", [space, cutoff]).fetchall()])
                for task_id in ids:
                    await self._mark_closed(task_id, now)
                    if await self._finalize(task_id):
                        closed += 1
        if closed:
            log.info("closed %d idle task(s)", closed)
        return closed

    async def summary(self, task_id: str, space_ids: Sequence[str]) -> TaskView | None:
        """One task by id, only if it lives in one of the allowed spaces."""
        if not space_ids:
            return None
        row = await self.store.aread(lambda c: c.execute(
            f"SELECT {_VIEW_COLUMNS} FROM tasks WHERE id = ? AND space_id IN (SELECT unnest(?))",
            [task_id, list(space_ids)]).fetchone())
        return TaskView(*row) if row else None

    async def recent(self, space_id: str, limit: int = 10) -> list[TaskView]:
        """The space's latest tasks, newest first."""
        rows = await self.store.aread(lambda c: c.execute(
            f"SELECT {_VIEW_COLUMNS} FROM tasks WHERE space_id = ? ORDER BY last_at DESC, started_at DESC LIMIT ?",
            [space_id, limit]).fetchall())
        return [TaskView(*r) for r in rows]

    # --- assignment ------------------------------------------------------------------------
    async def _assign_locked(self, space_id: str) -> None:
        def load(c: Conn) -> tuple[list[ChunkInfo], dict[str, Verdict]]:
            chunks = [_chunk(r) for r in c.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM memories WHERE space_id = ? AND kind = 'chunk' AND status = 'active' "
                "AND task_id IS NULL ORDER BY created_at, seq", [space_id]).fetchall()]
            return chunks, stored_verdicts(c, space_id, list({x.turn_id for x in chunks if x.turn_id}))

        chunks, verdicts = await self.store.aread(load)
        if not chunks:
            return
        task = await self._load_open(space_id)
        for turn in group_turns(chunks):
            step = boundary_step(task.rules_view() if task else None, turn, self.settings.idle_gap)
            if step.action == "ask" and task is not None:
                # The ingest call's verdict (the rules' SAME when it left it out); the separate
                # judge only for a turn stored raw, whose ingest call failed.
                folded = verdicts.get(turn.chunks[0].turn_id or "")
                step = fold_step(folded, self.settings.second_look_below) if folded else await self._judge(task, turn)
            if step.action == "new":
                if task is not None:
                    await self._mark_closed(task.id, utc_naive(turn.started_at))
                    await self._finalize(task.id)
                task = await self._start(space_id, turn)
                log.debug("task %s started (%s)", task.id, step.rule)
            else:
                assert task is not None
                await self._attach(task, turn)

    async def _load_open(self, space_id: str) -> _Open | None:
        def load(c: Conn) -> _Open | None:
            row = c.execute(
                "SELECT id, session_id, last_at, first_user_text FROM tasks WHERE space_id = ? AND status = 'open' "
                "AND closed_at IS NULL ORDER BY last_at DESC LIMIT 1", [space_id]).fetchone()
            if row is None:
                return None
            tail = c.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM memories WHERE task_id = ? AND kind = 'chunk' "
                "ORDER BY created_at DESC, seq DESC LIMIT 40", [row[0]]).fetchall()
            turns = group_turns([_chunk(r) for r in reversed(tail)])
            return _Open(row[0], space_id, row[1], row[2], row[3], deque(turns, maxlen=self.settings.context_turns))

        return await self.store.aread(load)

    async def _start(self, space_id: str, turn: Turn) -> _Open:
        first_user = cut_text(turn.user_text, FIRST_USER_CHARS) or None
        task = _Open(new_id("t"), space_id, turn.session_id, utc_naive(turn.ended_at), first_user,
                     deque([turn], maxlen=self.settings.context_turns))

        def write(c: Conn) -> None:
            c.execute(
                "INSERT INTO tasks (id, space_id, session_id, status, first_user_text, chunk_count, started_at, last_at) "
                "VALUES (?, ?, ?, 'open', ?, ?, ?, ?)",
                [task.id, space_id, turn.session_id, first_user, len(turn.chunks), utc_naive(turn.started_at),
                 task.last_at])
            self._link(c, task.id, task.space_id, turn)

        await self.store.awrite(write)
        return task

    async def _attach(self, task: _Open, turn: Turn) -> None:
        task.last_at = max(task.last_at, utc_naive(turn.ended_at))
        if task.first_user_text is None and turn.has_user:
            task.first_user_text = cut_text(turn.user_text, FIRST_USER_CHARS)
        task.recent.append(turn)

        def write(c: Conn) -> None:
            c.execute(
                "UPDATE tasks SET chunk_count = chunk_count + ?, last_at = ?, first_user_text = ? WHERE id = ?",
                [len(turn.chunks), task.last_at, task.first_user_text, task.id])
            self._link(c, task.id, task.space_id, turn)

        await self.store.awrite(write)

    @staticmethod
    def _link(c: Conn, task_id: str, space_id: str, turn: Turn) -> None:
        c.execute("UPDATE memories SET task_id = ? WHERE id IN (SELECT unnest(?))",
                  [task_id, [x.id for x in turn.chunks]])
        turn_ids = list({x.turn_id for x in turn.chunks if x.turn_id})
        if turn_ids:
            forget_verdicts(c, space_id, turn_ids)

    # --- the boundary judge ----------------------------------------------------------------
    async def _judge(self, task: _Open, turn: Turn) -> Step:
        s = self.settings
        new = _turn_lines([turn], s.boundary_chars)
        first = trim(redact(task.first_user_text or ""), s.boundary_chars)
        context = "Recent turns:\n" + _turn_lines(list(task.recent), s.boundary_chars)
        verdict = await self._ask(TASK_BOUNDARY_SYSTEM, TASK_BOUNDARY_USER.format(first=first, context=context, new=new))
        step = resolve_verdict(verdict, threshold=s.second_look_below)
        if step.action == "second_look":
            asked = await self._user_messages(task.id, s.recheck_user_messages)
            context = "Everything the user said in it:\n" + "\n".join(
                f"user: {trim(redact(t), s.boundary_chars)}" for t in asked)
            second = await self._ask(TASK_BOUNDARY_RECHECK_SYSTEM,
                                     TASK_BOUNDARY_USER.format(first=first, context=context, new=new))
            step = (resolve_verdict(verdict, second, threshold=s.second_look_below) if second is not None
                    else Step("same", "llm_failed"))
        log.debug("task %s boundary: %s (%s)", task.id, step.action, step.rule)
        return step

    async def _ask(self, system: str, user: str) -> Verdict | None:
        try:
            ans = await complete_json(self.llm, system, user, BoundaryAnswer, purpose="task_boundary",
                                               max_tokens=self.settings.boundary_max_tokens)
        except Exception as exc:  # any failure means SAME: a wrong merge is cheaper than a lost task
            log.warning("task boundary judge failed (%s: %s); keeping the current task", type(exc).__name__, str(exc)[:300])
            return None
        return Verdict(ans.verdict == "NEW", max(0.0, min(1.0, ans.confidence)))

    async def _user_messages(self, task_id: str, limit: int) -> list[str]:
        return await self.store.aread(lambda c: [r[0] for r in c.execute(
            "SELECT text FROM memories WHERE task_id = ? AND kind = 'chunk' AND role = 'user' "
            "ORDER BY created_at, seq LIMIT ?", [task_id, limit]).fetchall()])

    # --- closing ---------------------------------------------------------------------------
    async def _mark_closed(self, task_id: str, when: datetime) -> None:
        await self.store.awrite(lambda c: c.execute(
            "UPDATE tasks SET closed_at = ? WHERE id = ? AND closed_at IS NULL", [when, task_id]))

    async def _finalize(self, task_id: str) -> bool:
        """Skip or summarise a closed task; False when the summary must wait for a retry."""
        def load(c: Conn) -> tuple[tuple | None, list[ChunkInfo]]:
            row = c.execute("SELECT space_id, session_id, last_at, status FROM tasks WHERE id = ?", [task_id]).fetchone()
            rows = c.execute(f"SELECT {_CHUNK_COLUMNS} FROM memories WHERE task_id = ? AND kind = 'chunk' "
                             "AND status = 'active' ORDER BY created_at, seq", [task_id]).fetchall()
            return row, [_chunk(r) for r in rows]

        row, chunks = await self.store.aread(load)
        if row is None or row[3] != "open":
            return False
        space_id, session_id, last_at, _ = row
        reason = skip_reason(TaskDigest.of(chunks), self.settings.skip)
        if reason is not None:
            await self.store.awrite(lambda c: c.execute(
                "UPDATE tasks SET status = 'skipped', skip_reason = ?, chunk_count = ? WHERE id = ?",
                [reason, len(chunks), task_id]))
            log.info("task %s skipped (%s)", task_id, reason)
            return True
        try:
            title, text = await self._summarise(chunks)
            vector = await asyncio.to_thread(self.embedder.embed_passages, [f"{title}\n{text}"])
        except Exception as exc:  # kept pending; close_idle retries it
            log.warning("task %s summary failed (%s: %s); will retry", task_id, type(exc).__name__, str(exc)[:300])
            return False
        row_mem = NewMemory(space_id=space_id, kind="task", text=text, title=title, created_at=last_at,
                            id=task_id, session_id=session_id)

        def write(c: Conn) -> None:
            c.execute("UPDATE tasks SET status = 'completed', title = ?, summary = ?, chunk_count = ? WHERE id = ?",
                      [title, text, len(chunks), task_id])
            c.execute("DELETE FROM memories WHERE id = ? AND kind = 'task'", [task_id])
            insert_memories(c, [row_mem], vector)

        await self.store.awrite(write)
        log.info("task %s completed (%d chunks)", task_id, len(chunks))
        return True

    async def _summarise(self, chunks: Sequence[ChunkInfo]) -> tuple[str, str]:
        language = user_language([c.text for c in chunks if c.role == "user"])
        ans = await complete_json(self.llm,
            TASK_SUMMARY_SYSTEM.format(language=LANGUAGE_HINT[language]),
            TASK_SUMMARY_USER.format(count=len(chunks), messages=format_chat(chunks, self.settings)),
            SummaryAnswer, purpose="task_summary", max_tokens=self.settings.summary_max_tokens)
        first_user = next((c.text for c in chunks if c.role == "user"), "")
        title = redact(trim(ans.title, 120)) or trim(redact(first_user), 60)
        ans = ans.model_copy(update={"title": title})
        # Redacted again: the model may echo something secret-looking from its own knowledge.
        return title, redact(render_summary(ans, language))
