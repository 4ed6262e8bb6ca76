"""What the operator does from the command line, the same whether or not a gateway is running.

`Operator` is the seam: `bot.operator.local.LocalOperator` opens the database itself (no
gateway), `bot.operator.remote.RemoteOperator` asks the running gateway's admin API (DuckDB lets
only one process hold the file). Both return the same frozen values, so `bot.cli` formats one
way and the output is identical. The JSON shapes below are the wire format of the admin routes
in bot.api.routes_operator (one definition, both ends).

This module is what the command line loads to talk to a running gateway, so it imports no
database, embedding model or LLM library: `memgate pairing list` must start in a blink.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from bot.access.api_key_views import ApiKey
from bot.access.erase_views import ErasePlan
from bot.errors import ConfigError
from bot.job_views import JobStatus, QueueStatus


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


@dataclass(frozen=True, slots=True)
class ImportSummary:
    """What `memory import` reports: rows added, rows already there, bad lines (number, reason)."""

    added: int
    present: int
    bad: tuple[tuple[int, str], ...] = field(default_factory=tuple)


# bot.access.identities.PUBLIC_SPACE, named again here: that module loads the database library,
# and this one is what the command line loads to talk to a running gateway.
PUBLIC_SPACE = "public"
Progress = Callable[[int], None]
OnBad = Callable[[int, str], None]


class Operator(Protocol):
    def pending(self) -> list[PendingLine]: ...
    def approve(self, code: str) -> Person: ...
    def deny(self, code: str) -> None: ...
    def jobs(self) -> list[JobStatus]: ...
    def keys(self) -> list[ApiKey]: ...
    def create_key(self, scope: str, space: str | None, user: str | None, expires: timedelta | None,
                   name: str | None) -> tuple[str, ApiKey]: ...
    def revoke_key(self, prefix: str) -> ApiKey: ...
    def search(self, query: str, space: str | None, limit: int, user: str | None = None) -> list[MemoryLine]: ...
    def list(self, space: str | None, kinds: Sequence[str], limit: int, user: str | None = None) -> list[MemoryLine]: ...
    def export(self, space: str | None, user: str | None) -> Iterator[str]: ...
    def import_lines(self, lines: list[bytes], space: str | None, user: str | None, *, source: str,
                     progress: Progress | None = None, on_bad: OnBad | None = None) -> ImportSummary: ...
    def reembed(self, progress: Progress | None = None) -> tuple[int, str]: ...
    def now(self) -> datetime: ...
    # The public space (`memgate public`): what every user's recall may read.
    def public_add(self, text: str) -> str: ...                          # the new memory's id
    def public_edit(self, memory_id: str, text: str) -> str | None: ...  # the new id; None: not a public memory
    def public_forget(self, memory_id: str) -> bool: ...                 # False: not a public memory
    # Erasing a person (`memgate memory erase`): the plan first, then the erase of what it showed.
    def erase_plan(self, space: str | None, user: str | None) -> ErasePlan: ...
    def erase(self, space: str | None, user: str | None) -> ErasePlan: ...
    def queue(self) -> QueueStatus: ...                                   # turns waiting to become memory


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


def queue_json(q: QueueStatus) -> dict:
    return {"waiting": q.waiting, "oldest": _iso(q.oldest), "now": _iso(q.now)}


def queue_from_json(d: dict) -> QueueStatus:
    return QueueStatus(d["waiting"], _dt(d["oldest"]), _dt(d["now"]))


def line_json(m: MemoryLine) -> dict:
    return {"id": m.id, "kind": m.kind, "space_id": m.space_id, "created_at": _iso(m.created_at),
            "pinned": m.pinned, "text": m.text, "score": m.score}


def line_from_json(d: dict) -> MemoryLine:
    return MemoryLine(d["id"], d["kind"], d["space_id"], _dt(d["created_at"]), d["pinned"], d["text"], d.get("score"))


def person_json(p: Person) -> dict:
    return {"identity": p.identity, "space_id": p.space_id, "role": p.role, "display_name": p.display_name}


def person_from_json(d: dict) -> Person:
    return Person(d["identity"], d["space_id"], d["role"], d["display_name"])


# --- shared by both sides -----------------------------------------------------------------
def user_space(people: Sequence[Person], who: str) -> str:
    """A person's space by 'channel:id' or display name (as /users shows them)."""
    found = [p for p in people if p.identity == who] or \
        [p for p in people if p.display_name.removeprefix("@").casefold() == who.removeprefix("@").casefold()]
    if len(found) != 1:
        raise ConfigError(f"no user {who!r}: see `memgate pairing list` / /users" if not found
                          else f"several users are called {who!r}: use one of {', '.join(p.identity for p in found)}")
    return found[0].space_id
