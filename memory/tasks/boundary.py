"""The task-boundary verdict folded into the ingest call (issue 13).

The ingest call already reads the turn, so it also answers SAME / NEW for the turn's user
message when an open task exists and the rules cannot decide (rules.boundary_step says "ask").
This module holds what that needs and nothing else:
- `TaskGist`: the open task as the ingest call is shown it (first request + its last few
  messages, trimmed), and the rules' view of it;
- `gist_for` (read) and `store_verdicts` / `stored_verdicts` / `forget_verdicts` (the
  `turn_boundaries` side table, written in the transaction that writes the turn's chunks, so a
  crash between ingest and task assignment neither loses nor duplicates a verdict);
- `fold_step`: a stored verdict -> a boundary Step, without the second-look call.

A verdict the call left out (or gave malformed) is decided by the rules: SAME (rules.MISSING_VERDICT,
stored like an answer), so a model that skips the field costs no second call per turn. Only a
turn stored raw (its ingest call failed) has no verdict, and the task processor asks its own judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from memory.store.connection import Conn
from memory.tasks.rules import MISSING_VERDICT, OpenTask, Step, Turn, Verdict, boundary_step
from memory.redaction import redact
from memory.text import trim

FIRST_CHARS = 200     # of the task's first request
LINE_CHARS = 150      # of each recent user line
RECENT_LINES = 3      # the task's latest messages (user and assistant: a follow-up often
                      # picks up a word of the reply, not of the question)


@dataclass(frozen=True, slots=True)
class TaskGist:
    """The open task, compactly: what the rules need and what the ingest call is shown."""

    task_id: str | None
    view: OpenTask
    first: str
    recent: tuple[str, ...]



def gist_for(con: Conn, space_id: str) -> TaskGist | None:
    """The space's open task as `TaskProcessor` will see it (None: the next turn starts one).

    Chunks already stored but not yet assigned belong to it too (they are assigned before
    the next turn), so its recent lines and last time include them.
    """
    row = con.execute(
        "SELECT id, session_id, last_at, first_user_text FROM tasks WHERE space_id = ? AND status = 'open' "
        "AND closed_at IS NULL ORDER BY last_at DESC LIMIT 1", [space_id]).fetchone()
    if row is None:
        return None
    task_id, session_id, last_at, first = row
    said = con.execute(
        "SELECT role, text FROM memories WHERE space_id = ? AND kind = 'chunk' AND role IN ('user', 'assistant') "
        "AND status = 'active' AND (task_id = ? OR task_id IS NULL) ORDER BY created_at DESC, seq DESC LIMIT ?",
        [space_id, task_id, RECENT_LINES]).fetchall()
    latest = con.execute(
        "SELECT max(created_at) FROM memories WHERE space_id = ? AND kind = 'chunk' AND task_id IS NULL",
        [space_id]).fetchone()[0]
    recent = tuple(_line(r, t) for r, t in reversed(said))
    view = OpenTask(session_id, max(last_at, latest) if latest else last_at, first is not None)
    return TaskGist(task_id, view, trim(redact(first or ""), FIRST_CHARS), recent)


def next_gist(gist: TaskGist | None, turn: Turn, step: Step) -> TaskGist | None:
    """The gist as the next turn of a batch sees it, whatever the model answers for `turn`.

    Either way the next turn's open task ends with `turn` and lies in its session; once asked,
    both sides had a user message, so it has one too. The shown lines gain the turn's own.
    """
    said = tuple(_line(c.role, c.text) for c in turn.chunks if c.role in ("user", "assistant"))
    first = next((trim(redact(c.text), FIRST_CHARS) for c in turn.chunks if c.role == "user"), "")
    if gist is None or step.action == "new":
        view = OpenTask(turn.session_id, turn.ended_at, turn.has_user)
        return TaskGist(None, view, first, said[-RECENT_LINES:])
    view = OpenTask(gist.view.session_id, max(gist.view.last_at, turn.ended_at), gist.view.has_user or turn.has_user)
    return replace(gist, view=view, first=gist.first or first, recent=(gist.recent + said)[-RECENT_LINES:])


def _line(role: str, text: str) -> str:
    return f"{role}: {trim(redact(text), LINE_CHARS)}"


def wants_verdict(gist: TaskGist | None, turn: Turn, gap: timedelta) -> Step:
    """The rules' step for `turn` against the gist; "ask" means the ingest call should answer."""
    return boundary_step(gist.view if gist else None, turn, gap)


def render_gist(gist: TaskGist) -> str:
    """The CURRENT TASK lines of the ingest prompt: the first request, then the latest messages."""
    lines = [f"first request: {gist.first}"] if gist.first else []
    lines += [t for t in gist.recent if t != f"user: {gist.first}"]
    return "\n".join(lines)


def fold_step(verdict: Verdict, threshold: float) -> Step:
    """A stored verdict -> a Step. An unsure NEW stays SAME: on the scripted episodes the separate
    second look always turned it into SAME, and a wrong merge is cheaper than a split task."""
    if verdict == MISSING_VERDICT:
        return Step("same", "verdict_missing")
    if not verdict.new:
        return Step("same", "folded_same")
    if verdict.confidence >= threshold:
        return Step("new", "folded_new")
    return Step("same", "folded_new_unsure")


def store_verdicts(con: Conn, space_id: str, turn_id: str, verdict: Verdict, at: datetime) -> None:
    """Keep the verdict with the turn (call inside the transaction writing the turn's rows)."""
    con.execute("DELETE FROM turn_boundaries WHERE space_id = ? AND turn_id = ?", [space_id, turn_id])
    con.execute("INSERT INTO turn_boundaries (turn_id, space_id, new, confidence, created_at) VALUES (?, ?, ?, ?, ?)",
                [turn_id, space_id, verdict.new, verdict.confidence, at])


def stored_verdicts(con: Conn, space_id: str, turn_ids: Sequence[str]) -> dict[str, Verdict]:
    """The stored verdicts of these turns of a space."""
    rows = con.execute("SELECT turn_id, new, confidence FROM turn_boundaries WHERE space_id = ? "
                       "AND turn_id IN (SELECT unnest(?))", [space_id, list(turn_ids)]).fetchall()
    return {t: Verdict(bool(n), float(c)) for t, n, c in rows}


def forget_verdicts(con: Conn, space_id: str, turn_ids: Sequence[str]) -> None:
    """Drop the verdicts of turns now assigned to a task (each is used once)."""
    con.execute("DELETE FROM turn_boundaries WHERE space_id = ? AND turn_id IN (SELECT unnest(?))",
                [space_id, list(turn_ids)])
