"""JSON answers from the model: ask for JSON matching a pydantic schema, parse it out of what the
model said (fences, chatter), and repair a bad answer once with the validation error.

Built on `LLM.complete` (memory/llm.py): a plain completion with the JSON response format.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory.errors import LLMError
from memory.llm import LLM, short_error

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


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


# The repair round shows the model its bad answer: at most this much of it (a runaway 2 MB
# answer would otherwise be sent back whole, and cost a context window).
REPAIR_ECHO_CHARS = 4000


async def complete_json(llm: LLM, system: str, user: str, schema: type[M], *, purpose: str,
                        max_tokens: int | None = None) -> M:
    """Ask for JSON matching `schema`; one repair round with the validation error, then LLMError."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    for attempt in range(2):
        result = await llm.complete(messages, purpose=purpose, max_tokens=max_tokens, json_mode=True)
        try:
            return schema.model_validate(extract_json(result.content))
        except (ValueError, ValidationError) as exc:
            if attempt == 1:
                raise LLMError(f"LLM answer for {purpose} did not match its schema: {short_error(exc)}") from exc
            messages += [
                {"role": "assistant", "content": _echo(result.content)},
                {"role": "user", "content": f"That answer was not valid: {short_error(exc)}. Reply with only the corrected JSON."},
            ]
    raise AssertionError("unreachable")


def _echo(answer: str) -> str:
    if len(answer) <= REPAIR_ECHO_CHARS:
        return answer
    return answer[:REPAIR_ECHO_CHARS] + f"\n[... {len(answer) - REPAIR_ECHO_CHARS} more characters cut]"
