"""What the ingest call shows and what it answers: one turn's TURN_USER text, a batch of a
space's turns in one prompt, the system prompt, JSON schema and token budget for exactly the
fields asked (`Ask`), and the answer parsed per turn.

Only the sections a turn needs are sent, and only their fields asked for: NEEDS TITLE (titles)
when a message is long enough to want a title, POSSIBLE DUPLICATES (dedup) when a message
resembles a stored chunk, facts when the turn has a user message, with KNOWN FACTS when stored
facts are close to them (so the reconciliation rides along instead of costing a second call),
CURRENT TASK (task) when the task rules cannot place the turn. The JSON schema bounds every list
and string, so a small model decoding to it cannot run on until the token limit.
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
from memory.ingest.raw import TITLE_CHARS
from memory.llm_json import lenient
from memory.recall.block import humanize_age
from memory.tasks.boundary import TaskGist, render_gist
from memory.tasks.rules import Verdict
from memory.redaction import redact
from memory.text import estimate_tokens, neutralize, render_name, trim

log = logging.getLogger(__name__)

KNOWN_CHARS = 160   # of each known fact shown
MAX_KNOWN = 10      # more close facts than this: the separate reconcile call sees them all
# What the call reads of an assistant message: facts come from the person's words, and a reply's
# start is enough for its title and for what "it" means (issue 30: a 3,900-character reply was
# pasted whole into a small model's prompt).
ASSISTANT_CHARS = 600


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

    @classmethod
    def plain(cls, messages: Sequence[TurnMessage], created_at: datetime, title_min_chars: int = TITLE_CHARS) -> TurnView:
        """A turn as a store with nothing in it would show it: no duplicates, no known facts, no
        task (what `memgate doctor` asks the model about, memory.ingest.turn_call.ask_turn)."""
        return cls(created_at, tuple(Shown(i, m, False) for i, m in enumerate(messages, start=1)),
                   tuple(i for i, m in enumerate(messages, start=1) if m.role != "tool" and len(m.text) > title_min_chars),
                   (), None)


# The fields of the ingest answer, in the order they are asked and answered.
FIELDS = ("titles", "dedup", "facts", "task")
FACTS_PER_USER_MESSAGE = 5      # the schema's bound on a turn's facts (a message states a handful)
FACT_CHARS = 200                # the schema's bound on one fact (atomic facts are short)
TITLE_LIMIT = 120               # and on one title (5-15 words)
# The token budget of an answer, from what it may hold (the schema's bounds): large enough that
# an answer decoded to the schema is never cut, small enough that a runaway one stops early.
_TOKENS = {"base": 16, "title": 40, "dedup": 60, "fact": 90, "task": 24}


@dataclass(frozen=True, slots=True)
class Ask:
    """What one ingest call asks of one turn: only the fields the turn needs."""

    titles: tuple[int, ...] = ()    # message numbers under NEEDS TITLE
    dedup: tuple[int, ...] = ()     # message numbers under POSSIBLE DUPLICATES
    users: int = 0                  # live user messages: facts are asked when there is one
    known: bool = False             # KNOWN FACTS shown: facts may name one ("known", "action")
    task: bool = False              # CURRENT TASK shown: the boundary verdict

    @classmethod
    def of(cls, view: TurnView) -> Ask:
        live = [s for s in view.messages if not s.stored]
        users = sum(1 for s in live if s.msg.role == "user")
        return cls(titles=tuple(view.needs_title), dedup=tuple(s.n for s in live if s.near), users=users,
                   known=bool(users and view.known), task=view.gist is not None)

    @property
    def facts(self) -> bool:
        return self.users > 0

    @property
    def fields(self) -> tuple[str, ...]:
        asked = {"titles": bool(self.titles), "dedup": bool(self.dedup), "facts": self.facts, "task": self.task}
        return tuple(f for f in FIELDS if asked[f])

    def facts_only(self) -> Ask:
        """The narrower ask after an unusable answer: the facts (and their reconciliation), which
        are lost without the model; titles fall back to the text, dedup to none, the task
        verdict to the rules."""
        return Ask(users=self.users, known=self.known)

    def max_facts(self, cap: int) -> int:
        return max(1, min(cap, FACTS_PER_USER_MESSAGE * self.users))

    def max_tokens(self, cap: int) -> int:
        """The answer's token budget (`cap`: the facts a turn may keep)."""
        t = _TOKENS
        return (t["base"] + t["title"] * len(self.titles) + t["dedup"] * len(self.dedup)
                + (t["fact"] * self.max_facts(cap) if self.facts else 0) + (t["task"] if self.task else 0))

    def schema(self, cap: int, *, batch: bool = False) -> dict[str, Any]:
        """The JSON schema of the answer: the fields asked, all required, every list and string bounded."""
        props: dict[str, Any] = {}
        if self.titles:
            props["titles"] = _object({str(n): {"type": "string", "maxLength": TITLE_LIMIT} for n in self.titles})
        if self.dedup:
            props["dedup"] = {"type": "array", "maxItems": len(self.dedup), "items": {
                "type": "object", "required": ["message", "verdict", "target"], "additionalProperties": False,
                "properties": {"message": {"enum": list(self.dedup)}, "verdict": {"enum": ["DUPLICATE", "UPDATE", "NEW"]},
                               "target": {"type": "integer", "minimum": 1}, "merged": {"type": "string"}}}}
        if self.facts:
            fact: dict[str, Any] = {
                "text": {"type": "string", "minLength": 2, "maxLength": FACT_CHARS},
                "category": {"enum": list(F.CATEGORIES)},
                "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 30}},
                "intent": {"enum": ["statement", "query"]}}
            required = list(fact)
            if self.users > 1:
                fact["from"] = {"type": "array", "minItems": 1, "maxItems": self.users, "items": {"type": "integer", "minimum": 1}}
                required.append("from")
            if self.known or batch:
                fact["action"] = {"enum": ["ADD", "NOOP", "UPDATE", "DELETE"]}
            if self.known:
                fact["known"] = {"type": "integer", "minimum": 1}
            if batch:
                fact["earlier"] = {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 1}}
            props["facts"] = {"type": "array", "maxItems": self.max_facts(cap),
                              "items": {"type": "object", "properties": fact, "required": required, "additionalProperties": False}}
        if self.task:
            props["task"] = _object({"verdict": {"enum": ["SAME", "NEW"]},
                                     "confidence": {"type": "number", "minimum": 0, "maximum": 1}})
        return _object(props)


def _object(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def system_for(asks: Sequence[Ask], *, batch: bool = False) -> str:
    """The system prompt for these asks: TURN_SYSTEM, an example of the fields asked, their rules."""
    fields = [f for f in FIELDS if any(f in a.fields for a in asks)]
    sources = any(a.users > 1 for a in asks)
    example = ", ".join(prompts.TURN_EXAMPLES[f].format(n=1, extra=', "from": [1]' if sources else "") for f in fields)
    rules = [prompts.TURN_RULES[f] for f in fields] + ([prompts.TURN_RULES["from"]] if sources else [])
    note = (prompts.TURN_BATCH_NOTE + (prompts.TURN_BATCH_TASK_NOTE if "task" in fields else "")) if batch else ""
    return "\n".join([prompts.TURN_SYSTEM, "{" + example + "}", *rules]) + note


def batch_schema(asks: Sequence[Ask], cap: int) -> dict[str, Any]:
    """The JSON schema of a batched answer: {"turns": {"k": turn k's schema}}."""
    return _object({"turns": _object({str(k): a.schema(cap, batch=True) for k, a in enumerate(asks, start=1)})})


def render_turn(view: TurnView, now: datetime, ask: Ask | None = None) -> str:
    """TURN_USER for one turn: its date, its messages and the sections of what is asked."""
    ask = ask or Ask.of(view)
    sections = []
    if ask.titles:
        sections.append(prompts.TURN_NEEDS_TITLE.format(numbers=", ".join(map(str, ask.titles))))
    near = render_near(view.messages) if ask.dedup else ""
    if near:
        sections.append(near)
    if ask.known:
        sections.append(prompts.TURN_KNOWN_FACTS.format(facts="\n".join(
            f"[{i}] ({humanize_age(e.created_at, now)}{', pinned' if e.pinned else ''}) {trim(redact(e.text), KNOWN_CHARS)}"
            for i, e in enumerate(view.known, start=1))))
    if ask.task and view.gist is not None:
        sections.append(prompts.TURN_TASK.format(gist=render_gist(view.gist)))
    return prompts.TURN_USER.format(date=f"{view.created_at:%Y-%m-%d %A}", messages=render_messages(view.messages),
                                    sections="".join("\n" + s for s in sections))


def render_batch(views: Sequence[TurnView], now: datetime) -> tuple[str, str]:
    """(system, user) for one call over several turns of a space, numbered from 1."""
    user = "\n\n".join(prompts.TURN_BATCH_TURN.format(k=k, turn=render_turn(v, now)) for k, v in enumerate(views, 1))
    return system_for([Ask.of(v) for v in views], batch=True), user


class BatchAnswer(BaseModel):
    turns: dict[str, Any] = Field(default_factory=dict)


def split_batch(answer: BatchAnswer, asks: Sequence[Ask]) -> list[TurnAnswer | None]:
    """Each turn's answer, validated on its own and mended like a single answer: None where it is
    missing, unusable, or lost the facts it was asked for, so one bad part costs that turn a
    call of its own, never the other turns their answers."""
    out: list[TurnAnswer | None] = []
    for k, ask in enumerate(asks, start=1):
        part = answer.turns.get(str(k))
        if not isinstance(part, dict):
            log.warning("batched ingest answer has no object for turn %d (it gave %s)", k, type(part).__name__)
            out.append(None)
            continue
        try:
            got = lenient(TurnAnswer, part)
        except (ValidationError, ValueError) as exc:
            log.warning("batched ingest answer for turn %d did not match its schema: %s", k, str(exc)[:200])
            out.append(None)
            continue
        if ask.facts and ("facts" not in part or "facts" in got.dropped):
            log.warning("batched ingest answer for turn %d %s its facts", k, "malformed" if "facts" in part else "left out")
            out.append(None)
            continue
        if got.notes:
            log.info("batched ingest answer for turn %d: left out %s", k, "; ".join(got.notes)[:300])
        out.append(got.value)
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
        elif s.msg.role == "assistant":
            text = trim(text, ASSISTANT_CHARS)
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
    return prompts.TURN_NEAR.format(items="\n".join(parts)) if parts else ""


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
