"""Dashboard sessions: a key is exchanged once for an HttpOnly, SameSite=Strict cookie, so the
key itself never sits in the browser's storage where a script could read it.

A session lives in memory (a gateway restart logs everyone out, which is the safe direction),
expires after `idle` seconds without a request, and carries a CSRF token that every write made
with the cookie must echo in `X-CSRF-Token`. The key behind a session is re-checked on every
request, so revoking it ends its sessions at once.

Logins are bounded per key: a key holds at most `per_key` sessions and a new login ends that
key's own idlest one, so no key can log out anyone else's browser however often it logs in.
The total is bounded too; when it is full of live sessions a login is refused, never making
room by ending someone else's.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "mg_session"
CSRF_HEADER = "X-CSRF-Token"
MAX_SESSIONS = 10_000     # a bound on memory whatever the number of keys
SESSIONS_PER_KEY = 20


class SessionsFull(Exception):
    """Every slot holds a live session of some key: the login is refused (nobody is evicted)."""


@dataclass(frozen=True, slots=True)
class Session:
    key_id: str
    csrf: str
    last_seen: float


class Sessions:
    """Token -> session, with an idle expiry on a monotonic clock and a cap per key."""

    def __init__(self, idle_seconds: float, *, clock: Callable[[], float], per_key: int = SESSIONS_PER_KEY,
                 max_sessions: int = MAX_SESSIONS) -> None:
        self.idle = idle_seconds
        self.clock = clock
        self.per_key = per_key
        self.max_sessions = max_sessions
        self._by_token: dict[str, Session] = {}
        self._by_key: dict[str, dict[str, None]] = {}   # key id -> its tokens, oldest login first

    def open(self, key_id: str) -> tuple[str, Session]:
        """A new session for a verified key: (cookie token, session). Raises SessionsFull."""
        self._sweep()
        mine = self._by_key.setdefault(key_id, {})
        while len(mine) >= self.per_key:
            self._drop(min(mine, key=lambda t: self._by_token[t].last_seen))
        if len(self._by_token) >= self.max_sessions:
            if not mine:
                del self._by_key[key_id]
            raise SessionsFull()
        token = secrets.token_urlsafe(32)
        s = Session(key_id, secrets.token_urlsafe(24), self.clock())
        self._by_token[token] = s
        mine[token] = None
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
            self._drop(token)
            return None
        s = Session(s.key_id, s.csrf, now)
        self._by_token[token] = s
        return s

    def close(self, token: str | None) -> None:
        """End the session of this cookie token (logout)."""
        if token and token in self._by_token:
            self._drop(token)

    def count(self, key_id: str | None = None) -> int:
        """Live sessions (of one key, or all)."""
        return len(self._by_token) if key_id is None else len(self._by_key.get(key_id, ()))

    def _drop(self, token: str) -> None:
        s = self._by_token.pop(token)
        mine = self._by_key.get(s.key_id)
        if mine is not None:
            mine.pop(token, None)
            if not mine:
                del self._by_key[s.key_id]

    def _sweep(self) -> None:
        now = self.clock()
        for t in [t for t, s in self._by_token.items() if now - s.last_seen > self.idle]:
            self._drop(t)


def csrf_ok(session: Session, presented: str | None) -> bool:
    """Constant-time check of the CSRF header against the session's token."""
    return bool(presented) and hmac.compare_digest(session.csrf.encode(), presented.encode())
