"""The ingest call itself: one turn (`ask_turn`, the one entry point for "one ingest call on one
turn", which `memgate doctor` uses too) or a batch of a space's turns (`ask_batch`), asked for
only the fields each turn needs, decoded to their JSON schema where the server can.

What a bad answer costs (issue 30: with SmolLM2-135M every turn went raw after 3 tries of 90-170 s):
- the answer is mended first (memory/llm_json.py: a cut answer closed after its last complete
  value, a malformed field left out, the rest kept);
- a batch that gives nothing usable sends its turns one by one; a batch part that is missing or
  lost its facts sends that turn alone (the worker);
- a turn whose answer is unusable, or lost the facts it was asked for, is asked for the facts
  alone (titles then fall back to the text, dedup to none, the task verdict to the rules), or,
  when the facts were all it asked, asked again with its answer and what was wrong with it;
- if that fails too, `UnusableAnswer` says why both times, and the worker stores the turn raw at
  once (findable, its facts extracted later) instead of retrying minutes later.
A call that timed out counts as unusable (asking the same again takes as long again); a server
that is down or refuses is an outage, which the queue retries.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import datetime

from memory.errors import ModelTimedOut
from memory.ingest import facts as F
from memory.ingest.turn_prompt import (
    Ask,
    BatchAnswer,
    TurnAnswer,
    TurnView,
    batch_schema,
    render_batch,
    render_turn,
    split_batch,
    system_for,
)
from memory.llm import LLM
from memory.llm_json import JsonAnswer, UnusableAnswer, ask_json

log = logging.getLogger(__name__)

PURPOSE = "ingest"


async def ask_turn(llm: LLM, view: TurnView, now: datetime, *, max_facts: int = F.MAX_FACTS_PER_TURN,
                   purpose: str = PURPOSE) -> TurnAnswer:
    """One turn's ingest answer: the fields it needs; if that answer is unusable or lost the facts,
    one more call: for the facts alone, or (when the facts were all it asked) the same with the
    answer and what was wrong with it. UnusableAnswer when the facts could not be had (why, each
    time); a turn without a user message never raises it (its titles fall back to its text).
    Outages are the LLMError of the call, for the queue's retries."""
    ask = Ask.of(view)
    if not ask.fields:
        return TurnAnswer()
    kept: TurnAnswer | None = None
    bad: str | None = None
    try:
        got = await _call(llm, view, now, ask, max_facts, purpose=purpose)
    except (UnusableAnswer, ModelTimedOut) as exc:
        why = _reason(exc)
        bad = exc.content if isinstance(exc, UnusableAnswer) else None
        if not ask.facts:
            log.warning("ingest call unusable (%s); titles from the text", why)
            return TurnAnswer()
    else:
        if _notes(got):
            log.info("ingest answer mended: left out %s", _notes(got))
        if not ask.facts or _has_facts(got):
            return got.value
        kept, bad = got.value, got.content
        why = f"it {_lost(got)}"
        why += " (cut at the token limit)" if got.cut else ""
    narrow = ask.facts_only()
    if narrow != ask:
        log.warning("ingest call for %s: %s; asking for the facts alone", ", ".join(ask.fields), why)
        label, again = "the facts alone", None
    elif bad is not None:
        log.warning("ingest call: %s; asking again with what was wrong", why)
        label, again = "asked again", (bad, why)
    else:
        raise UnusableAnswer(purpose, why)
    try:
        facts = await _call(llm, view, now, narrow, max_facts, again, purpose=purpose)
    except (UnusableAnswer, ModelTimedOut) as exc:
        raise UnusableAnswer(purpose, f"{why}; {label}: {_reason(exc)}") from None
    if not _has_facts(facts):
        raise UnusableAnswer(purpose, f"{why}; {label}: it {_lost(facts)}")
    return (kept or TurnAnswer()).model_copy(update={"facts": facts.value.facts})


async def ask_batch(llm: LLM, views: Sequence[TurnView], now: datetime, *,
                    max_facts: int = F.MAX_FACTS_PER_TURN) -> list[TurnAnswer | None]:
    """One call for several turns of a space: each turn's answer, None where its part is missing,
    unusable or lost its facts (that turn then goes alone). UnusableAnswer, ModelTimedOut or
    another LLMError when the call as a whole gave nothing."""
    asks = [Ask.of(v) for v in views]
    system, user = render_batch(views, now)
    got = await ask_json(llm, system, user, BatchAnswer, purpose=PURPOSE, expect=("turns",),
                         max_tokens=_TURNS_TOKENS + sum(a.max_tokens(max_facts) for a in asks),
                         json_schema={"name": "memory_turns", "schema": batch_schema(asks, max_facts)})
    return split_batch(got.value, asks)


_TURNS_TOKENS = 16  # {"turns": {...}} around the turns' answers


async def _call(llm: LLM, view: TurnView, now: datetime, ask: Ask, max_facts: int,
                again: tuple[str, str] | None = None, *, purpose: str = PURPOSE) -> JsonAnswer[TurnAnswer]:
    return await ask_json(llm, system_for([ask]), render_turn(view, now, ask), TurnAnswer, purpose=purpose,
                          max_tokens=ask.max_tokens(max_facts), expect=ask.fields, again=again,
                          json_schema={"name": "memory_turn", "schema": ask.schema(max_facts)})


def _has_facts(got: JsonAnswer[TurnAnswer]) -> bool:
    """The answer holds its facts: not left out, not malformed, and not a list that was open when
    the answer stopped and closed empty (its first fact was cut off: "no facts" would be a lie
    that nothing extracts later)."""
    if "facts" not in got.present or "facts" in got.dropped:
        return False
    return bool(got.value.facts) or not got.closed or _EMPTY_FACTS.search(got.content) is not None


def _lost(got: JsonAnswer[TurnAnswer]) -> str:
    """How an answer lost its facts (for the log)."""
    if "facts" not in got.present:
        return "left the facts out"
    return f"gave malformed facts ({_notes(got)})" if "facts" in got.dropped else "had its first fact cut off"


_EMPTY_FACTS = re.compile(r'"facts"\s*:\s*\[\s*\]')


def _notes(got: JsonAnswer) -> str:
    return "; ".join(got.notes)[:300]


def _reason(exc: Exception) -> str:
    return exc.reason if isinstance(exc, UnusableAnswer) else str(exc)
