"""Read an HTTP `Retry-After` header (RFC 9110 section 10.2.3): how long the server asks us to wait.

The value is either delta-seconds ("120") or an HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT").
`retry_delay` turns it into the pause before the next attempt: what the server asked, never
less than our own backoff, never more than `cap` (a server asking for an hour must not stall a
reply that long; the caller then fails or retries later).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["parse_retry_after", "retry_delay"]

_SECONDS = re.compile(r"[0-9]{1,10}")


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from `now` (>= 0), or None when the header is absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # RFC 9110: an HTTP-date is always GMT
    return max(0.0, (when - now).total_seconds())


def retry_delay(asked: float | None, backoff: float, cap: float) -> float:
    """max(asked, backoff), at most cap: the pause before the next attempt."""
    wanted = backoff if asked is None else max(asked, backoff)
    return min(cap, max(0.0, wanted))
