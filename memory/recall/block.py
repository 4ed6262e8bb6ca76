"""The injected block: recalled memories rendered as one <memory-context> data block, with
ages a person would say ("3 days ago") and a token budget.

Everything inside comes from people (memories, names, skill descriptions), so each item is one
line, neutralised: it cannot close the block, open another one or forge a chat-template role.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from memory.prompts import MEMORY_BLOCK_HEADER
from memory.recall import ranking
from memory.recall.search import MemoryHit
from memory.store.rows import utc_naive
from memory.text import MEMORY_CLOSE, MEMORY_OPEN, estimate_tokens, neutralize, render_name


def fold_overlapping(hits: Sequence[MemoryHit], threshold: float = 0.7) -> list[MemoryHit]:
    """Fold hits whose words overlap more than `threshold` into the higher-ranked one."""
    kept: list[MemoryHit] = []
    for h in hits:
        if all(ranking.word_overlap(h.text, k.text) <= threshold for k in kept):
            kept.append(h)
    return kept


def humanize_age(created_at: datetime, now: datetime) -> str:
    """'today', 'yesterday', '3 days ago', '2 weeks ago', '5 months ago', '2 years ago'."""
    days = (utc_naive(now) - utc_naive(created_at)).total_seconds() / 86400
    if days < 1:
        return "today"
    if days < 2:
        return "yesterday"
    if days < 14:
        return f"{int(days)} days ago"
    if days < 60:
        return f"{int(days // 7)} weeks ago"
    if days < 730:
        return f"{int(days // 30)} months ago"
    return f"{int(days // 365)} years ago"


# What auto-recall injects (engine.recall_block): skills come apart, at most `inject_skills`.
BLOCK_KINDS = ("chunk", "fact", "task")

_KIND_LABEL = {"fact": "fact", "chunk": "said", "task": "task", "skill": "skill"}


# What a hit from a shared space (the public one) is called in the block: the model must not take
# a note everyone can read (and admins write) for a fact about the person it is talking to.
SHARED_LABEL = "shared note"


def render_block(hits: Sequence[MemoryHit], now: datetime, *, max_items: int = 6, max_tokens: int = 800,
                 fold: float = 0.7, shared_spaces: Collection[str] = ()) -> str:
    """The <memory-context> block injected before the user's message ('' when no hit fits).

    Hits whose space is in `shared_spaces` are labelled SHARED_LABEL instead of their kind."""
    lines = [line for _, line in block_lines(hits, now, max_items=max_items, max_tokens=max_tokens, fold=fold,
                                              shared_spaces=shared_spaces)]
    if not lines:
        return ""
    return "\n".join([MEMORY_OPEN, MEMORY_BLOCK_HEADER, *lines, MEMORY_CLOSE])


def block_lines(hits: Sequence[MemoryHit], now: datetime, *, max_items: int = 6, max_tokens: int = 800,
                fold: float = 0.7, shared_spaces: Collection[str] = ()) -> list[tuple[MemoryHit, str]]:
    """The hits that fit the block, each with its line: what the model is shown (the bench's
    R@block counts evidence among these)."""
    lines: list[tuple[MemoryHit, str]] = []
    budget = max_tokens - estimate_tokens(MEMORY_BLOCK_HEADER) - 8
    for h in fold_overlapping(hits, fold)[:max_items]:
        speaker = render_name(h.speaker) if h.kind == "chunk" else ""
        # A line with no name was still said by someone: the bot's own words must not read as the
        # person's ("(said, today) Brindlequix is a canine name." in a real model's prompt).
        who = f" {speaker}" if speaker else {"user": " user", "assistant": " assistant"}.get(h.role, "")
        pin = ", pinned" if h.pinned else ""
        text = one_line(h.text)
        if not text:
            continue
        label = SHARED_LABEL if h.space_id in shared_spaces else _KIND_LABEL.get(h.kind, h.kind)
        line = f"- [{h.id}] ({label}{who}, {humanize_age(h.created_at, now)}"\
               f", {utc_naive(h.created_at):%Y-%m-%d}{pin}) {text}"
        cost = estimate_tokens(line)
        if cost > budget:
            if budget > 40 and not lines:
                line = line[: budget * 3] + "…"
                cost = budget
            else:
                break
        lines.append((h, line))
        budget -= cost
    return lines


def one_line(text: str) -> str:
    """Person-written text as one neutralised line (every kind of line break collapsed)."""
    return " ".join(neutralize(text).split())


def extend_block(block: str, lines: Sequence[str]) -> str:
    """Add item lines (e.g. skills) at the end of a block, or make a block of them alone."""
    safe = [f"- {one_line(line.removeprefix('- '))}" for line in lines if one_line(line.removeprefix("- "))]
    if not safe:
        return block
    if not block:
        return "\n".join([MEMORY_OPEN, MEMORY_BLOCK_HEADER, *safe, MEMORY_CLOSE])
    body = block.removesuffix(MEMORY_CLOSE).rstrip("\n")
    return "\n".join([body, *safe, MEMORY_CLOSE])
