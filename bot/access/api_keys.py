"""API keys: `mg_` + a random token, shown once; only its SHA-256 hash and a short prefix are kept.

A key reaches exactly one space (read or write scope) or, with admin scope, the admin routes
(and no space). Keys expire and can be revoked by prefix; a revoked or expired key is refused
the same way as an unknown one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from bot.access.api_key_views import ApiKey, ApiKeyError, Scope, format_keys, parse_duration  # noqa: F401 (re-exported)
from memory.store.connection import Conn, Store
from memory.store.rows import new_id, utc_naive
from memory.store.schema import Migration

SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
KEY_PREFIX = "mg_"
# Enough of the key to tell keys apart in `keys list` and to revoke one; far too short to guess with.
SHOWN_CHARS = 10

KEY_MIGRATIONS: tuple[Migration, ...] = (
    Migration(400, "api keys and jobs", """
        CREATE TABLE api_keys (
            id VARCHAR PRIMARY KEY,
            prefix VARCHAR NOT NULL UNIQUE,     -- the first SHOWN_CHARS of the key, for list/revoke
            hash VARCHAR NOT NULL UNIQUE,       -- sha256 hex of the whole key
            name VARCHAR,
            scope VARCHAR NOT NULL,             -- read | write | admin
            space_id VARCHAR,                   -- NULL for admin keys
            created_at TIMESTAMP NOT NULL,
            expires_at TIMESTAMP,               -- NULL = never
            revoked_at TIMESTAMP,
            last_used_at TIMESTAMP
        );
        -- Jobs that are not turns (imports); a turn's job is its row of the ingest queue.
        CREATE TABLE api_jobs (
            id VARCHAR PRIMARY KEY,
            space_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,              -- import
            status VARCHAR NOT NULL,            -- queued | running | done | failed
            memory_ids VARCHAR[],
            error VARCHAR,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        );
    """),
)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


_COLUMNS = "id, prefix, name, scope, space_id, created_at, expires_at, revoked_at"


class Keys:
    """Create, verify, list and revoke API keys in the store."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def create(self, scope: Scope, space_id: str | None, *, expires: timedelta | None = None,
               name: str | None = None) -> tuple[str, ApiKey]:
        """A new key: returns the key itself (shown once, never stored) and its record."""
        if scope not in SCOPES:
            raise ApiKeyError(f"unknown scope {scope!r}: read, write or admin")
        if (scope == "admin") != (space_id is None):
            raise ApiKeyError("an admin key has no space; a read or write key needs exactly one")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = utc_naive(self.clock())
        rec = ApiKey(new_id("k"), key[:SHOWN_CHARS], name, scope, space_id, now,
                     now + expires if expires else None, None)
        self.store.write(lambda c: c.execute(
            f"INSERT INTO api_keys ({_COLUMNS}, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [rec.id, rec.prefix, rec.name, rec.scope, rec.space_id, rec.created_at, rec.expires_at, None, hash_key(key)]))
        return key, rec

    def verify(self, key: str) -> ApiKey | None:
        """The live key for `key`, or None (unknown, revoked or expired: the caller says 401)."""
        if not key.startswith(KEY_PREFIX):
            return None
        digest = hash_key(key)
        row = self.store.read(lambda c: c.execute(
            f"SELECT {_COLUMNS}, hash FROM api_keys WHERE hash = ?", [digest]).fetchone())
        # The lookup is by hash already; compare again in constant time so a timing side channel
        # on the index lookup tells nothing about how much of a key matched.
        if row is None or not hmac.compare_digest(row[-1], digest):
            return None
        rec = ApiKey(*row[:-1])
        now = utc_naive(self.clock())
        if rec.revoked_at is not None or (rec.expires_at is not None and rec.expires_at <= now):
            return None
        return rec

    def live(self, key_id: str) -> ApiKey | None:
        """The key with this id if it is still live (a dashboard session re-checks it on every request)."""
        row = self.store.read(lambda c: c.execute(
            f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", [key_id]).fetchone())
        if row is None:
            return None
        rec = ApiKey(*row)
        now = utc_naive(self.clock())
        if rec.revoked_at is not None or (rec.expires_at is not None and rec.expires_at <= now):
            return None
        return rec

    def list(self) -> list[ApiKey]:
        return [ApiKey(*r) for r in self.store.read(lambda c: c.execute(
            f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, id").fetchall())]

    def revoke_named(self, names: tuple[str, ...]) -> int:
        """Revoke every live admin key with one of these names (the gateway's own, left by earlier runs)."""
        now = utc_naive(self.clock())

        def write(con: Conn) -> int:
            ids = [r[0] for r in con.execute(
                "SELECT id FROM api_keys WHERE scope = 'admin' AND revoked_at IS NULL AND name IN (SELECT unnest(?))",
                [list(names)]).fetchall()]
            if ids:
                con.execute("UPDATE api_keys SET revoked_at = ? WHERE id IN (SELECT unnest(?))", [now, ids])
            return len(ids)

        return self.store.write(write)

    def revoke(self, prefix: str) -> ApiKey:
        """Revoke the one live key whose prefix starts with `prefix` (ambiguity is an error)."""
        now = utc_naive(self.clock())
        prefix = prefix.strip().rstrip("…").rstrip(".")  # pasted from `keys list`, ellipsis and all
        if len(prefix) < 4:
            raise ApiKeyError("give at least 4 characters of the key's prefix")

        def write(con: Conn) -> ApiKey:
            rows = con.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE starts_with(prefix, ?) AND revoked_at IS NULL",
                               [prefix]).fetchall()
            if len(rows) != 1:
                raise ApiKeyError(f"no live key starts with {prefix!r}" if not rows
                                else f"{len(rows)} keys start with {prefix!r}: give more of the prefix")
            con.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?", [now, rows[0][0]])
            return ApiKey(*rows[0][:7], now)

        return self.store.write(write)
