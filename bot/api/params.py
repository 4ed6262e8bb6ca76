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


async def body_json(request: web.Request) -> dict:
    try:
        data = await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError):
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
