"""A task's summary as text: the chat the summariser reads (redacted, within budget), the answer it
gives, and the stored summary in the user's language. Skill evolution cuts and labels its text the
same way (skills.py)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from memory.tasks.rules import ChunkInfo, Language
from memory.tasks.settings import TaskSettings
from memory.redaction import redact


class SummaryAnswer(BaseModel):
    title: str
    goal: str = ""
    steps: list[str] = []
    result: str = ""
    details: list[str] = []


LANGUAGE_HINT: dict[str, str] = {"zh": "Chinese, the user's language", "en": "the language of the user's messages"}
SUMMARY_LABELS: dict[str, tuple[str, str, str, str]] = {
    "en": ("Goal", "Key steps", "Result", "Key details"),
    "zh": ("目标", "关键步骤", "结果", "关键细节"),
}


def render_summary(ans: SummaryAnswer, language: Language) -> str:
    """The stored summary text: title, goal, numbered steps, result, details (labels in `language`)."""
    goal, steps, result, details = SUMMARY_LABELS.get(language, SUMMARY_LABELS["en"])
    sep = "：" if language == "zh" else ": "
    out = [ans.title.strip()]
    if ans.goal.strip():
        out.append(f"{goal}{sep}{ans.goal.strip()}")
    items = [s.strip() for s in ans.steps if s.strip()]
    if items:
        out.append(f"{steps}{sep.rstrip()}")
        out += [f"{i}. {s}" for i, s in enumerate(items, 1)]
    if ans.result.strip():
        out.append(f"{result}{sep}{ans.result.strip()}")
    items = [s.strip() for s in ans.details if s.strip()]
    if items:
        out.append(f"{details}{sep.rstrip()}")
        out += [f"- {s}" for s in items]
    return "\n".join(out)


def cut_text(text: str, limit: int) -> str:
    """Cut to `limit` characters keeping line breaks (code stays code); marks the cut."""
    return text if len(text) <= limit else text[:limit].rstrip() + " …[cut]"


def format_chat(chunks: Sequence[ChunkInfo], s: TaskSettings) -> str:
    """The task's messages for the summariser: redacted, numbered, within the character budget.

    Over budget, the first two messages (they state the goal) and the latest that fit are kept.
    """
    lines = [
        f"[{i}] {c.role}: {cut_text(redact(c.text.strip()), s.summary_tool_chars if c.role == 'tool' else s.summary_chunk_chars)}"
        for i, c in enumerate(chunks, 1)
    ]
    if sum(len(x) + 1 for x in lines) <= s.summary_total_chars:
        return "\n".join(lines)
    head = lines[:2]
    budget = s.summary_total_chars - sum(len(x) + 1 for x in head) - 40
    tail: list[str] = []
    for line in reversed(lines[2:]):
        if len(line) + 1 > budget:
            break
        tail.insert(0, line)
        budget -= len(line) + 1
    left_out = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... {left_out} messages left out ...]", *tail])
