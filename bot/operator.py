"""What the operator does from the command line, the same whether or not a gateway is running.

`Operator` is the seam: `LocalOperator` opens the database itself (no gateway), `RemoteOperator`
asks the running gateway's admin API (DuckDB lets only one process hold the file). Both return
the same frozen values, so `bot.cli` formats one way and the output is identical. The JSON shapes
below are the wire format of the admin routes in bot.api.routes_operator (one definition, both ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.access import Access
from bot.api.keys import ApiKey, Keys
from bot.errors import ConfigError
from bot.gateway_client import GatewayClient
from bot.pairing import Pairing
from bot.scheduler import JobStatus, load_job_statuses
from memory.engine import MemoryEngine


@dataclass(frozen=True, slots=True)
class PendingLine:
    """A pairing request as `pairing list` shows it."""

    code: str
    identity: str          # channel:external_id
    display_name: str


@dataclass(frozen=True, slots=True)
class Person:
    identity: str
    space_id: str
    role: str
    display_name: str


@dataclass(frozen=True, slots=True)
class MemoryLine:
    """One memory as `memory search|list` prints it (score only from a search)."""

    id: str
    kind: str
    space_id: str
    created_at: datetime
    pinned: bool
    text: str
    score: float | None = None


class Operator(Protocol):
    def pending(self) -> list[PendingLine]: ...
    def approve(self, code: str) -> Person: ...
    def deny(self, code: str) -> None: ...
    def jobs(self) -> list[JobStatus]: ...
    def keys(self) -> list[ApiKey]: ...
    def create_key(self, scope: str, space: str | None, user: str | None, expires: timedelta | None,
                   name: str | None) -> tuple[str, ApiKey]: ...
    def revoke_key(self, prefix: str) -> ApiKey: ...
    def search(self, query: str, space: str | None, limit: int) -> list[MemoryLine]: ...
    def list(self, space: str | None, kinds: Sequence[str], limit: int) -> list[MemoryLine]: ...
    def now(self) -> datetime: ...


# --- the wire format ------------------------------------------------------------------------
def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _dt(s: str | None) -> datetime | None:
    return datetime.fromisoformat(s) if s else None


def key_json(k: ApiKey) -> dict:
    return {"id": k.id, "prefix": k.prefix, "name": k.name, "scope": k.scope, "space_id": k.space_id,
            "created_at": _iso(k.created_at), "expires_at": _iso(k.expires_at), "revoked_at": _iso(k.revoked_at)}


def key_from_json(d: dict) -> ApiKey:
    return ApiKey(d["id"], d["prefix"], d["name"], d["scope"], d["space_id"], _dt(d["created_at"]),
                  _dt(d["expires_at"]), _dt(d["revoked_at"]))


def job_json(j: JobStatus) -> dict:
    return {"name": j.name, "interval_s": j.interval.total_seconds() if j.interval else None,
            "last_run": _iso(j.last_run), "duration_s": j.duration_s, "last_error": j.last_error,
            "next_run": _iso(j.next_run), "running": j.running, "runs": j.runs, "failures": j.failures,
            "last_ok": _iso(j.last_ok)}


def job_from_json(d: dict) -> JobStatus:
    return JobStatus(d["name"], timedelta(seconds=d["interval_s"]) if d.get("interval_s") else None,
                     _dt(d["last_run"]), d.get("duration_s"), d.get("last_error"), _dt(d.get("next_run")),
                     bool(d.get("running")), d.get("runs", 0), d.get("failures", 0), _dt(d.get("last_ok")))


def line_json(m: MemoryLine) -> dict:
    return {"id": m.id, "kind": m.kind, "space_id": m.space_id, "created_at": _iso(m.created_at),
            "pinned": m.pinned, "text": m.text, "score": m.score}


def line_from_json(d: dict) -> MemoryLine:
    return MemoryLine(d["id"], d["kind"], d["space_id"], _dt(d["created_at"]), d["pinned"], d["text"], d.get("score"))


def person_json(p: Person) -> dict:
    return {"identity": p.identity, "space_id": p.space_id, "role": p.role, "display_name": p.display_name}


# --- shared by both sides -----------------------------------------------------------------
def user_space(people: Sequence[Person], who: str) -> str:
    """A person's space by 'channel:id' or display name (as /users shows them)."""
    found = [p for p in people if p.identity == who] or \
        [p for p in people if p.display_name.removeprefix("@").casefold() == who.removeprefix("@").casefold()]
    if len(found) != 1:
        raise ConfigError(f"no user {who!r}: see `memgate pairing list` / /users" if not found
                          else f"several users are called {who!r}: use one of {', '.join(p.identity for p in found)}")
    return found[0].space_id


def all_spaces(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT id FROM spaces ORDER BY id").fetchall()]


async def search_lines(engine: MemoryEngine, query: str, spaces: Sequence[str], limit: int) -> list[MemoryLine]:
    hits = await asyncio.to_thread(engine.recaller.search, query, list(spaces), limit=limit)
    return [MemoryLine(h.id, h.kind, h.space_id, h.created_at, h.pinned, h.text, h.score) for h in hits]


async def list_lines(engine: MemoryEngine, spaces: Sequence[str], kinds: Sequence[str], limit: int) -> list[MemoryLine]:
    rows = await engine.list(list(spaces), kinds=tuple(kinds), limit=limit)
    return [MemoryLine(r.id, r.kind, r.space_id, r.created_at, r.pinned, r.text) for r in rows]


async def people(access: Access) -> list[Person]:
    return [Person(i.key, i.space_id, i.role.value, i.display_name) for i in await access.users()]


# --- the two operators --------------------------------------------------------------------
class LocalOperator:
    """No gateway running: act on the database file directly."""

    def __init__(self, engine: MemoryEngine, access: Access, pairing: Pairing, keys: Keys,
                 clock: Callable[[], datetime]) -> None:
        self.engine, self.access, self.pairing, self.keys_store, self.clock = engine, access, pairing, keys, clock
        self.store = engine.store

    def now(self) -> datetime:
        return self.clock()

    def pending(self) -> list[PendingLine]:
        return [PendingLine(p.code, p.key, p.display_name) for p in asyncio.run(self.pairing.pending())]

    def approve(self, code: str) -> Person:
        i = asyncio.run(self.pairing.approve(code.upper(), None)).identity
        return Person(i.key, i.space_id, i.role.value, i.display_name)

    def deny(self, code: str) -> None:
        asyncio.run(self.pairing.deny(code.upper(), None))

    def jobs(self) -> list[JobStatus]:
        return load_job_statuses(self.store)

    def keys(self) -> list[ApiKey]:
        return self.keys_store.list()

    def create_key(self, scope, space, user, expires, name):
        if user:
            space = user_space(asyncio.run(people(self.access)), user)
        if space:
            asyncio.run(self.engine.ensure_space(space, "user"))
        return self.keys_store.create(scope, None if scope == "admin" else space, expires=expires, name=name)

    def revoke_key(self, prefix: str) -> ApiKey:
        return self.keys_store.revoke(prefix)

    def _spaces(self, space: str | None) -> list[str]:
        return [space] if space else self.store.read(all_spaces)

    def search(self, query: str, space: str | None, limit: int) -> list[MemoryLine]:
        return asyncio.run(search_lines(self.engine, query, self._spaces(space), limit))

    def list(self, space: str | None, kinds: Sequence[str], limit: int) -> list[MemoryLine]:
        return asyncio.run(list_lines(self.engine, self._spaces(space), kinds, limit))


class RemoteOperator:
    """A gateway is running: ask its admin API (routes in bot.api.routes_operator and routes_admin)."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client

    def now(self) -> datetime:
        return _dt(self.client.call("GET", "/api/v1/admin/clock")["now"])

    def pending(self) -> list[PendingLine]:
        return [PendingLine(r["code"], r["identity"], r["display_name"])
                for r in self.client.call("GET", "/api/v1/admin/pairing")["requests"]]

    def approve(self, code: str) -> Person:
        d = self.client.call("POST", f"/api/v1/admin/pairing/{_seg(code.upper())}/approve")["approved"]
        return Person(d["identity"], d["space_id"], d["role"], d["display_name"])

    def deny(self, code: str) -> None:
        self.client.call("POST", f"/api/v1/admin/pairing/{_seg(code.upper())}/deny")

    def jobs(self) -> list[JobStatus]:
        return [job_from_json(d) for d in self.client.call("GET", "/api/v1/admin/job-statuses")["jobs"]]

    def keys(self) -> list[ApiKey]:
        return [key_from_json(d) for d in self.client.call("GET", "/api/v1/admin/keys")["keys"]]

    def create_key(self, scope, space, user, expires, name):
        body: dict[str, Any] = {"scope": scope, "space_id": space, "user": user, "name": name,
                                "expires_s": expires.total_seconds() if expires else None}
        d = self.client.call("POST", "/api/v1/admin/keys", body)
        return d["key"], key_from_json(d["record"])

    def revoke_key(self, prefix: str) -> ApiKey:
        return key_from_json(self.client.call("POST", "/api/v1/admin/keys/revoke", {"prefix": prefix}))

    def search(self, query: str, space: str | None, limit: int) -> list[MemoryLine]:
        d = self.client.call("GET", "/api/v1/admin/memories/search", q=query, space=space, limit=limit)
        return [line_from_json(m) for m in d["memories"]]

    def list(self, space: str | None, kinds: Sequence[str], limit: int) -> list[MemoryLine]:
        d = self.client.call("GET", "/api/v1/admin/memories/list", space=space, kind=",".join(kinds), limit=limit)
        return [line_from_json(m) for m in d["memories"]]


def _seg(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")
