"""Dashboard sessions: a key is exchanged once for an HttpOnly, SameSite=Strict cookie, so the
key itself never sits in the browser's storage where a script could read it.

A session lives in memory (a gateway restart logs everyone out, which is the safe direction),
expires after `idle` seconds without a request, and carries a CSRF token that every write made
with the cookie must echo in `X-CSRF-Token`. The key behind a session is re-checked on every
request, so revoking it ends its sessions at once.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "mg_session"
CSRF_HEADER = "X-CSRF-Token"
MAX_SESSIONS = 10_000     # a bound on memory whatever the number of logins; the idlest go first


@dataclass(frozen=True, slots=True)
class Session:
    key_id: str
    csrf: str
    last_seen: float


class Sessions:
    """Token -> session, with an idle expiry on a monotonic clock."""

    def __init__(self, idle_seconds: float, *, clock: Callable[[], float]) -> None:
        self.idle = idle_seconds
        self.clock = clock
        self._by_token: dict[str, Session] = {}

    def open(self, key_id: str) -> tuple[str, Session]:
        """A new session for a verified key: (cookie token, session)."""
        self._sweep()
        if len(self._by_token) >= MAX_SESSIONS:
            oldest = min(self._by_token, key=lambda t: self._by_token[t].last_seen)
            del self._by_token[oldest]
        token = secrets.token_urlsafe(32)
        s = Session(key_id, secrets.token_urlsafe(24), self.clock())
        self._by_token[token] = s
        return token, s

    def touch(self, token: str | None) -> Session | None:
        """The live session for a cookie token (its idle timer restarts), or None."""
        if not token:
            return None
        s = self._by_token.get(token)
        now = self.clock()
        if s is None:
            return None
        if now - s.last_seen > self.idle:
            del self._by_token[token]
            return None
        s = Session(s.key_id, s.csrf, now)
        self._by_token[token] = s
        return s

    def close(self, token: str | None) -> None:
        self._by_token.pop(token or "", None)

    def _sweep(self) -> None:
        now = self.clock()
        for t in [t for t, s in self._by_token.items() if now - s.last_seen > self.idle]:
            del self._by_token[t]


def csrf_ok(session: Session, presented: str | None) -> bool:
    """Constant-time check of the CSRF header against the session's token."""
    return bool(presented) and hmac.compare_digest(session.csrf.encode(), presented.encode())
