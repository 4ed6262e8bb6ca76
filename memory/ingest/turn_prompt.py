"""What the ingest call shows and what it answers: one turn's TURN_USER text, a batch of a
space's turns in one prompt, and the answer parsed per turn.

Only the sections a turn needs are sent: NEEDS TITLE when a message is long enough to want a
title, POSSIBLE DUPLICATES when a message resembles a stored chunk, KNOWN FACTS when stored
facts are close to the turn's user messages (so the reconciliation rides along instead of
costing a second call), CURRENT TASK when the task rules cannot place the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from memory import prompts
from memory.ingest import facts as F
from memory.ingest.capture import TurnMessage
from memory.recall.block import humanize_age
from memory.tasks.boundary import TaskGist, render_gist
from memory.tasks.rules import Verdict
from memory.redaction import redact
from memory.text import estimate_tokens, neutralize, render_name, trim

log = logging.getLogger(__name__)

KNOWN_CHARS = 160   # of each known fact shown
MAX_KNOWN = 10      # more close facts than this: the separate reconcile call sees them all


class DedupVerdict(BaseModel):
    message: int
    verdict: str
    target: int | None = None
    merged: str | None = None


class TaskVerdict(BaseModel):
    verdict: str
    confidence: float = 0.5

    @field_validator("verdict")
    @classmethod
    def _same_or_new(cls, v: str) -> str:
        v = v.strip().upper()
        if v not in ("SAME", "NEW"):
            raise ValueError("verdict must be SAME or NEW")
        return v

    def as_verdict(self) -> Verdict:
        return Verdict(self.verdict == "NEW", max(0.0, min(1.0, self.confidence)))


class TurnAnswer(BaseModel):
    titles: dict[str, str] = Field(default_factory=dict)
    dedup: list[DedupVerdict] = Field(default_factory=list)
    facts: list[F.ExtractedFact] = Field(default_factory=list)
    task: TaskVerdict | None = None

    @field_validator("task", mode="before")
    @classmethod
    def _lenient_task(cls, v: Any) -> Any:
        # A malformed verdict is no verdict (the task rules then decide: rules.MISSING_VERDICT);
        # it must not cost the turn its titles and facts.
        try:
            return TaskVerdict.model_validate(v) if v is not None else None
        except ValidationError:
            return None


@dataclass(frozen=True, slots=True)
class Shown:
    """One message as the ingest call numbers it."""

    n: int
    msg: TurnMessage
    stored: bool                        # an exact duplicate of a stored chunk
    near: tuple[str, ...] = ()          # texts of stored chunks it resembles


@dataclass(frozen=True, slots=True)
class TurnView:
    """Everything one turn's part of the prompt shows."""

    created_at: datetime
    messages: tuple[Shown, ...]
    needs_title: tuple[int, ...]
    known: tuple[F.Existing, ...]
    gist: TaskGist | None               # set only when the turn's boundary verdict is asked for


def render_turn(view: TurnView, now: datetime) -> str:
    """TURN_USER for one turn: its date, its messages and only the sections it needs."""
    sections = []
    if view.needs_title:
        sections.append(prompts.TURN_NEEDS_TITLE.format(numbers=", ".join(map(str, view.needs_title))))
    near = render_near(view.messages)
    if near:
        sections.append(near)
    if view.known:
        sections.append(prompts.TURN_KNOWN_FACTS.format(facts="\n".join(
            f"[{i}] ({humanize_age(e.created_at, now)}{', pinned' if e.pinned else ''}) {trim(redact(e.text), KNOWN_CHARS)}"
            for i, e in enumerate(view.known, start=1))))
    if view.gist is not None:
        sections.append(prompts.TURN_TASK.format(gist=render_gist(view.gist)))
    return prompts.TURN_USER.format(date=f"{view.created_at:%Y-%m-%d %A}", messages=render_messages(view.messages),
                                    sections="".join("\n" + s for s in sections))


def render_batch(views: Sequence[TurnView], now: datetime) -> tuple[str, str]:
    """(system, user) for one call over several turns of a space, numbered from 1."""
    user = "\n\n".join(prompts.TURN_BATCH_TURN.format(k=k, turn=render_turn(v, now)) for k, v in enumerate(views, 1))
    return prompts.TURN_SYSTEM + prompts.TURN_BATCH_NOTE, user


class BatchAnswer(BaseModel):
    turns: dict[str, Any] = Field(default_factory=dict)


def split_batch(answer: BatchAnswer, count: int) -> list[TurnAnswer | None]:
    """Each turn's answer, validated on its own: None where it is missing or malformed, so one
    bad part costs that turn a call of its own, never the other turns their answers."""
    out: list[TurnAnswer | None] = []
    for k in range(1, count + 1):
        part = answer.turns.get(str(k))
        try:
            out.append(TurnAnswer.model_validate(part) if isinstance(part, dict) else None)
        except ValidationError as exc:
            log.warning("batched ingest answer for turn %d did not match its schema: %s", k, str(exc)[:200])
            out.append(None)
    return out


def render_messages(messages: Sequence[Shown]) -> str:
    """The numbered messages. Secrets are redacted before the LLM sees anything; long tool
    output is trimmed; continuation lines are indented so a message cannot forge a "[n] role:"
    line of its own."""
    lines = []
    for s in messages:
        text = redact(s.msg.text)
        if s.msg.role == "tool":
            text = trim(text, 600)
        elif estimate_tokens(text) > 1500:
            text = trim(text, 4000)
        text = neutralize(text).replace("\n", "\n    ")
        speaker = render_name(s.msg.speaker)
        lines.append(f"[{s.n}] {s.msg.role}{' (' + speaker + ')' if speaker else ''}"
                     f"{' (already stored)' if s.stored else ''}: {text}")
    return "\n".join(lines)


def render_near(messages: Sequence[Shown]) -> str:
    """The POSSIBLE DUPLICATES section ("" when no message resembles a stored chunk)."""
    parts = []
    for s in messages:
        if s.near:
            cands = "\n".join(f"  ({j}) {trim(redact(t), 400)}" for j, t in enumerate(s.near, start=1))
            parts.append(f"message {s.n} resembles:\n{cands}")
    return "POSSIBLE DUPLICATES:\n" + "\n".join(parts) if parts else ""


def folded_decisions(facts: Sequence[F.ExtractedFact]) -> list[F.Decision]:
    """The reconciliation the ingest call gave with its facts (against KNOWN FACTS), as the
    separate reconcile call would have given it; a fact without an action is ADD."""
    out = []
    for i, f in enumerate(facts):
        action = (f.action or "ADD").upper()
        if action not in ("ADD", "UPDATE", "DELETE", "NOOP"):
            action = "ADD"
        out.append(F.Decision(new=F.letter(i), action=action, target=f.known, text=f.text if action == "UPDATE" else None))
    return out


class BatchMates:
    """The facts a batched call gave for the earlier turns of its batch, as they were stored.

    The call wrote them itself, so for the later turns they count as shown, like KNOWN FACTS:
    a later turn's fact that repeats, changes or cancels one names it as "earlier": [k, i]
    (turn k, its i-th fact), and no separate reconcile call is needed for it."""

    def __init__(self) -> None:
        self.facts: dict[tuple[int, int], F.Existing] = {}

    def shown_with(self, known: Sequence[F.Existing], facts: Sequence[F.ExtractedFact]) -> list[F.Existing]:
        """`known` and then the batch-mates' facts, numbered on from `known`; each fact naming an
        earlier one gets its number as `known` (the folded decision's target)."""
        shown = list(known)
        number = {e.id: n for n, e in enumerate(shown, start=1)}
        for e in self.facts.values():
            if e.id not in number:
                shown.append(e)
                number[e.id] = len(shown)
        for f in facts:
            mate = self.facts.get(f.earlier) if f.earlier else None
            if mate is not None:
                f.known = number[mate.id]
        return shown

    def record(self, k: int, given: Sequence[F.ExtractedFact], plan: F.FactPlan) -> None:
        """After turn k is written: its facts by their place in its answer (`given`), and the
        earlier facts it retired replaced by their successors (or dropped when deleted)."""
        for old, successor in plan.retired.items():
            for key, e in list(self.facts.items()):
                if e.id == old:
                    if successor is None:
                        del self.facts[key]
                    else:
                        self.facts[key] = successor
        place = {id(f): i for i, f in enumerate(given, start=1)}
        for f, stands in zip(plan.facts, plan.outcome):
            if stands is not None and id(f) in place:
                self.facts[(k, place[id(f)])] = stands
