"""JSON answers from the model: ask for JSON matching a pydantic schema (decoded to a JSON schema
where the server can), take it out of what the model said, and mend what a small model gets
wrong before anything is asked again.

What a bad answer becomes, cheapest first (issue 30: a 135M model gave `{"title": "1", ...` cut at
the token limit, and `{"titles": [1, 2, 3, 4]}`):
- fences and chatter around the object are ignored (`extract_json`);
- an answer cut at the token limit is closed after its last complete value (`close_cut`);
- a part that does not match the schema is left out, the rest kept (`lenient`): a list of
  titles where an object was asked costs the titles, not the facts beside them;
- an answer with none of the fields asked is unusable (`UnusableAnswer`, with the reason: cut at
  the token limit, not JSON, which field was wrong), and the caller asks for less
  (memory/ingest/turn_call.py) or, for the other memory calls, once more with the error shown
  (`complete_json`'s repair round).
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from memory.errors import LLMError
from memory.llm import LLM, short_error

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


class UnusableAnswer(LLMError):
    """The model answered, but nothing usable could be taken from it; `reason` says why."""

    def __init__(self, purpose: str, reason: str, content: str | None = None) -> None:
        super().__init__(f"LLM answer for {purpose} unusable: {reason}")
        self.reason = reason
        self.content = content      # the answer as given (None when there was none to show)


def extract_json(text: str) -> Any:
    """Parse the JSON object in a model answer, tolerating fences and chatter around it."""
    cleaned = _FENCE.sub("", text.strip())
    try:
        return json.loads(cleaned)
    except json.JSONDecodeError:
        pass
    start = min((i for i in (cleaned.find("{"), cleaned.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("no JSON object in the answer")
    end = max(cleaned.rfind("}"), cleaned.rfind("]"))
    return json.loads(cleaned[start : end + 1])


# Cut points tried from the end of a cut answer: enough for the last few values of any answer.
_CUTS_TRIED = 64


def close_cut(text: str) -> Any:
    """What a JSON answer cut short holds: its longest prefix ending after a complete value, with
    the strings, arrays and objects still open closed. A value cut in its middle is left out
    (half a fact is not a fact). ValueError when no prefix parses."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("no JSON object in the answer")
    body = text[start:]
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []    # (cut before this index, the closers then needed)
    in_string = escaped = False
    for i, ch in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]":
            if stack:
                stack.pop()
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch == ",":
            cuts.append((i, "".join(reversed(stack))))
    for end, closers in reversed(cuts[-_CUTS_TRIED:]):
        try:
            return json.loads(body[:end] + closers)
        except json.JSONDecodeError:
            continue
    raise ValueError("no complete value before the cut")


@dataclass(frozen=True, slots=True)
class Lenient(Generic[M]):
    """A validated answer and what was left out of it to make it valid."""

    value: M
    dropped: tuple[str, ...] = ()       # whole top-level fields left out as malformed
    notes: tuple[str, ...] = ()         # every part left out, with the reason (for the log)


def lenient(schema: type[M], data: Any) -> Lenient[M]:
    """`data` validated against `schema`, leaving out what does not fit: a malformed list item
    (one bad fact among good ones), else the whole top-level field; a list that lost every item
    counts as a field left out. ValidationError when the answer is not an object."""
    if not isinstance(data, dict):
        return Lenient(schema.model_validate(data))  # raises: a list or a number is no answer
    data = copy.deepcopy(data)
    dropped: list[str] = []
    notes: list[str] = []
    for _ in range(16):  # each round removes at least one part; a bounded answer needs few
        try:
            return Lenient(schema.model_validate(data), tuple(dropped), tuple(notes))
        except ValidationError as exc:
            items: dict[str, set[int]] = {}
            fields: dict[str, str] = {}
            for err in exc.errors():
                loc = err["loc"]
                if not loc or not isinstance(loc[0], str) or loc[0] not in data:
                    raise
                top = loc[0]
                if len(loc) >= 2 and isinstance(loc[1], int) and isinstance(data[top], list):
                    items.setdefault(top, set()).add(loc[1])
                    notes.append(f"{top}[{loc[1]}]: {err['msg']}")
                elif top not in fields:
                    fields[top] = err["msg"]
            for top, msg in fields.items():
                del data[top]
                items.pop(top, None)
                dropped.append(top)
                notes.append(f"{top}: {msg}")
            for top, gone in items.items():
                data[top] = [x for i, x in enumerate(data[top]) if i not in gone]
                if not data[top]:
                    dropped.append(top)
    raise ValueError("the answer kept failing its schema")


def parse_answer(content: str, schema: type[M], *, cut: bool, expect: Sequence[str] = ()) -> Lenient[M]:
    """The usable part of a model's answer (see the module docstring); UnusableAnswer's reason
    otherwise. `cut`: the answer stopped at the token limit. `expect`: the fields asked, of
    which at least one must be there."""
    try:
        data = extract_json(content)
    except (ValueError, json.JSONDecodeError) as exc:
        try:
            data = close_cut(content)
        except ValueError:
            why = f"cut at the token limit after {len(content)} characters" if cut else f"not JSON ({short_error(exc, 120)})"
            raise ValueError(why) from None
    try:
        got = lenient(schema, data)
    except (ValidationError, ValueError) as exc:
        raise ValueError(f"not the JSON asked for: {_first_error(exc)}") from None
    if expect and isinstance(data, dict) and not any(f in data for f in expect):
        keys = ", ".join(list(data)[:6]) or "nothing"
        raise ValueError(f"none of the fields asked ({', '.join(expect)}); it gave {keys}"
                         + (" (cut at the token limit)" if cut else ""))
    return got


@dataclass(frozen=True, slots=True)
class JsonAnswer(Generic[M]):
    """One JSON call's usable answer."""

    value: M
    dropped: tuple[str, ...]    # top-level fields left out as malformed
    present: frozenset[str]     # top-level fields the answer held (valid or not)
    seconds: float
    notes: tuple[str, ...] = ()
    cut: bool = False           # stopped at the token limit (and closed after its last complete value)
    content: str = ""           # the answer as given
    closed: bool = False        # it parsed only once closed after its last complete value (close_cut)


async def ask_json(llm: LLM, system: str, user: str, schema: type[M], *, purpose: str, max_tokens: int | None = None,
                   json_schema: dict[str, Any] | None = None, expect: Sequence[str] = (),
                   again: tuple[str, str] | None = None) -> JsonAnswer[M]:
    """One call for JSON matching `schema` (decoded to `json_schema` where the server can), mended
    as far as it goes; UnusableAnswer (with why, and how long the call took) when nothing of it
    is usable. `again`: (an earlier answer, why it was unusable), shown to the model to correct.
    Transport failures are the LLMError `complete` raises."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if again is not None:
        messages += _repair(*again)
    extra = {"json_schema": json_schema} if json_schema is not None else {}
    t0 = time.monotonic()
    result = await llm.complete(messages, purpose=purpose, max_tokens=max_tokens, json_mode=True, **extra)
    seconds = time.monotonic() - t0
    cut = getattr(result, "cut", False)
    try:
        got = parse_answer(result.content, schema, cut=cut, expect=expect)
    except ValueError as exc:
        limit = f" (max_tokens {max_tokens})" if cut and max_tokens else ""
        raise UnusableAnswer(purpose, f"{exc}{limit}, after {seconds:.1f} s", result.content) from None
    keys, closed = _top_keys(result.content)
    return JsonAnswer(got.value, got.dropped, frozenset(keys), seconds, got.notes, cut, result.content, closed)


def _top_keys(content: str) -> tuple[list[str], bool]:
    """The answer's top-level keys, and whether it had to be closed to parse."""
    closed = False
    try:
        data = extract_json(content)
    except (ValueError, json.JSONDecodeError):
        closed = True
        try:
            data = close_cut(content)
        except ValueError:
            return [], closed
    return (list(data) if isinstance(data, dict) else []), closed


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the answer"
        return f"{where}: {err['msg']}"
    return short_error(exc, 160)


# The repair round shows the model its bad answer: at most this much of it (a runaway 2 MB
# answer would otherwise be sent back whole, and cost a context window).
REPAIR_ECHO_CHARS = 4000


async def complete_json(llm: LLM, system: str, user: str, schema: type[M], *, purpose: str,
                        max_tokens: int | None = None, json_schema: dict[str, Any] | None = None) -> M:
    """Ask for JSON matching `schema`, mended where it can be; one repair round with the reason
    when nothing was usable, then UnusableAnswer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    extra = {"json_schema": json_schema} if json_schema is not None else {}
    for attempt in range(2):
        t0 = time.monotonic()
        result = await llm.complete(messages, purpose=purpose, max_tokens=max_tokens, json_mode=True, **extra)
        cut = getattr(result, "cut", False)
        try:
            return parse_answer(result.content, schema, cut=cut).value
        except ValueError as exc:
            if attempt == 1:
                raise UnusableAnswer(purpose, f"{exc}, after {time.monotonic() - t0:.1f} s") from None
            messages += _repair(result.content, str(exc))
    raise AssertionError("unreachable")


def _repair(answer: str, why: str) -> list[dict[str, Any]]:
    """The repair round's turns: the bad answer (bounded) and what was wrong with it."""
    return [{"role": "assistant", "content": _echo(answer)},
            {"role": "user", "content": f"That answer was not valid: {why[:300]}. Reply with only the corrected JSON."}]


def _echo(answer: str) -> str:
    if len(answer) <= REPAIR_ECHO_CHARS:
        return answer
    return answer[:REPAIR_ECHO_CHARS] + f"\n[... {len(answer) - REPAIR_ECHO_CHARS} more characters cut]"
