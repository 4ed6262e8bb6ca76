"""What `memgate keys` shows of an API key, without the database: the stored record (never the
key itself), the scope, lifetimes such as 30d, and the `keys list` text. The command line
imports this to print what a running gateway sent, and must stay quick to start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from memory.errors import MemgateError

Scope = Literal["read", "write", "admin"]


class ApiKeyError(MemgateError):
    """A key operation was refused (bad scope, unknown prefix, bad duration)."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key, as the server and `keys list` see it (never the key itself)."""

    id: str
    prefix: str
    name: str | None
    scope: Scope
    space_id: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def allows(self, needed: Scope) -> bool:
        """read < write; admin is its own realm (admin routes only)."""
        if needed == "admin" or self.scope == "admin":
            return needed == self.scope
        return needed == "read" or self.scope == "write"


_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$", re.I)
_UNIT = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


def parse_duration(text: str) -> timedelta:
    """'30d', '12h', '2w', '90m' -> a timedelta (a positive whole number and one unit)."""
    m = _DURATION.match(text or "")
    if not m or int(m.group(1)) <= 0:
        raise ApiKeyError(f"bad duration {text!r}: use a number and m|h|d|w, e.g. 30d")
    return int(m.group(1)) * _UNIT[m.group(2).lower()]


def _naive_utc(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo is not None else dt


def format_keys(keys: list[ApiKey], now: datetime) -> str:
    """`memgate keys list`: one line per key, never the key itself."""
    if not keys:
        return "no API keys (create one with: memgate keys create --user NAME)"
    lines = []
    for k in keys:
        state = ("revoked" if k.revoked_at else "expired" if k.expires_at and k.expires_at <= _naive_utc(now)
                 else "live")
        until = f"until {k.expires_at:%Y-%m-%d %H:%M}" if k.expires_at else "no expiry"
        lines.append(f"{k.prefix}…  {k.scope:<5}  {k.space_id or '(admin)':<24}  {state:<7}  {until:<22}  {k.name or ''}")
    return "\n".join(lines)
