"""Reading request input strictly: a JSON object body, booleans, ISO times, pages. Bad input is
a 400 naming the parameter, never a 500."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from aiohttp import web

from bot.api.errors import ApiError

MAX_LIMIT = 200
DEFAULT_LIMIT = 50


MAX_DEPTH = 32      # our bodies nest 3 deep; deeper is a probe, and deep enough breaks any recursive code


def json_depth(value: object) -> int:
    """How deep arrays and objects nest (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v if isinstance(x, (list, dict)))
    return deepest


class TooDeep(ValueError):
    """JSON nested past MAX_DEPTH."""

    def __init__(self) -> None:
        super().__init__(f"the JSON nests deeper than {MAX_DEPTH} levels")


def loads_bounded(text: str | bytes) -> object:
    """json.loads, with nesting past MAX_DEPTH a ValueError (TooDeep) like any other bad JSON."""
    try:
        data = json.loads(text)
    except RecursionError:  # the C parser stops itself at the interpreter's recursion limit
        raise TooDeep() from None
    if json_depth(data) > MAX_DEPTH:
        raise TooDeep()
    return data


async def body_json(request: web.Request) -> dict:
    try:
        data = await request.json(loads=loads_bounded)
    except TooDeep as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(400, "bad_request", "the body must be JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    return data


def opt_bool(q: Mapping[str, str], name: str) -> bool | None:
    raw = q.get(name)
    if raw in (None, ""):
        return None
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ApiError(400, "bad_request", f"{name} must be true or false")


def opt_time(q: Mapping[str, str], name: str) -> datetime | None:
    """An ISO date or date-time; naive means UTC."""
    raw = q.get(name)
    if raw in (None, ""):
        return None
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be an ISO date or time, e.g. 2026-01-31") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def opt_int(q: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = q.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be a whole number") from None
    if not lo <= value <= hi:
        raise ApiError(400, "bad_request", f"{name} must be between {lo} and {hi}")
    return value


def page(q: Mapping[str, str]) -> tuple[int, int]:
    """(limit, offset): limit 1..200 (default 50), offset >= 0."""
    return opt_int(q, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT), opt_int(q, "offset", 0, 0, 10**9)
