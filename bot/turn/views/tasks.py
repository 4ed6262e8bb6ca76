"""Plain-text views for chat commands and tools: /tasks, task_summary, /skills, /skill NAME.

(/jobs and `memgate jobs` use bot.job_views.format_jobs, beside the JobStatus it formats.)

Pure functions of the views they get; no I/O. Plain text, because every
channel can show it and the adapters add formatting with a plain-text fallback themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory.store.rows import utc_naive
from memory.tasks.processor import TaskView
from memory.tasks.skill_library import SkillVersionView, SkillView
from memory.text import trim

_STATUS_MARK = {"open": "…", "completed": "✓", "skipped": "–"}


def _when(dt: datetime | None) -> str:
    return "never" if dt is None else f"{utc_naive(dt):%Y-%m-%d %H:%M}"


def format_tasks(tasks: Sequence[TaskView]) -> str:
    """/tasks: one line per task, newest first as given: mark, id, title or first request, status."""
    if not tasks:
        return "No tasks yet."
    lines = ["Recent tasks:"]
    for t in tasks:
        label = t.title or trim(t.first_user_text or "(no user message)", 60)
        status = t.status if t.status != "skipped" else f"skipped: {t.skip_reason or '?'}"
        if t.status == "open" and t.closed_at is not None:
            status = "closing"
        lines.append(f"{_STATUS_MARK.get(t.status, '?')} {t.id} {label} [{status}, {t.chunk_count} msgs, "
                     f"{_when(t.last_at)}]")
    # The person reads this, not the agent: say how to ask, never the tool's name.
    lines.append(f"Send /tasks ID to read a task's summary (e.g. /tasks {tasks[0].id}), or just ask me about it.")
    return "\n".join(lines)


def format_task(task: TaskView) -> str:
    """One task for the task_summary tool: a header line, then its summary (or why it has none)."""
    head = f"Task {task.id} ({task.status}, {task.chunk_count} messages, {_when(task.started_at)} to {_when(task.last_at)})"
    if task.summary:
        return f"{head}\n{task.summary}"
    if task.status == "skipped":
        return f"{head}\nNo summary: skipped by the rule {task.skip_reason}."
    return f"{head}\nNo summary yet: the task is still open."


def format_skills(skills: Sequence[SkillView]) -> str:
    """/skills: name, version, uses and description of each skill."""
    if not skills:
        return "No skills yet. They grow from finished how-to tasks."
    lines = ["Skills:"]
    for k in skills:
        uses = "1 use" if k.usage_count == 1 else f"{k.usage_count} uses"
        lines.append(f"- {k.name} (v{k.version}, {uses}): {trim(k.description, 120)}")
    lines.append("Show one with /skill NAME.")
    return "\n".join(lines)


def format_skill(skill: SkillView, history: Sequence[SkillVersionView] = ()) -> str:
    """/skill NAME: the SKILL.md of the latest version, then the version history."""
    parts = [skill.content.rstrip()]
    if history:
        parts.append("")
        parts.append("Version history:")
        for v in sorted(history, key=lambda v: v.version):
            parts.append(f"v{v.version} {_when(v.created_at)}: {v.changelog or ''}".rstrip(": "))
    return "\n".join(parts)
