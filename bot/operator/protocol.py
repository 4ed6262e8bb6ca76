"""What the operator does from the command line, the same whether or not a gateway is running.

`Operator` is the seam: `bot.operator_local.LocalOperator` opens the database itself (no
gateway), `RemoteOperator` asks the running gateway's admin API (DuckDB lets only one process
hold the file). Both return the same frozen values, so `bot.cli` formats one way and the output
is identical. The JSON shapes below are the wire format of the admin routes in
bot.api.routes_operator (one definition, both ends).

This module is what the command line loads to talk to a running gateway, so it imports no
database, embedding model or LLM library: `memgate pairing list` must start in a blink.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.access.api_key_views import ApiKey
from bot.errors import ConfigError
from bot.operator.gateway_client import GatewayCallError, GatewayClient
from bot.job_views import JobStatus


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


Progress = Callable[[int], None]
OnBad = Callable[[int, str], None]
JOB_POLL_S = 0.2  # a job's status is one indexed read: polling often costs the gateway nothing


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


# --- through the running gateway ------------------------------------------------------------
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

    def _call(self, method: str, path: str, body: dict | bytes | None = None, **query: object) -> dict:
        """A call whose 400 is the operator's mistake (an unknown --user, a file for several spaces):
        a ConfigError, as it is without a gateway."""
        try:
            return self.client.call(method, path, body, **query)
        except GatewayCallError as exc:
            if exc.status == 400:
                raise ConfigError(str(exc)) from None
            raise

    def search(self, query: str, space: str | None, limit: int, user: str | None = None) -> list[MemoryLine]:
        d = self._call("GET", "/api/v1/admin/memories/search", q=query, space=space, user=user, limit=limit)
        return [line_from_json(m) for m in d["memories"]]

    def list(self, space: str | None, kinds: Sequence[str], limit: int, user: str | None = None) -> list[MemoryLine]:
        d = self._call("GET", "/api/v1/admin/memories/list", space=space, user=user, kind=",".join(kinds), limit=limit)
        return [line_from_json(m) for m in d["memories"]]

    def export(self, space: str | None, user: str | None) -> Iterator[str]:
        """The export's JSONL lines as the gateway streams them (never held whole here)."""
        try:
            stream = self.client.lines("/api/v1/admin/export", space=space, user=user)
        except GatewayCallError as exc:
            if exc.status == 400:
                raise ConfigError(str(exc)) from None
            raise
        return (line.decode("utf-8") for line in stream)

    def import_lines(self, lines: list[bytes], space: str | None, user: str | None, *, source: str,
                     progress: Progress | None = None, on_bad: OnBad | None = None) -> ImportSummary:
        """Upload the file; the gateway imports it as a job, polled here until it is done."""
        job = self._call("POST", "/api/v1/admin/import", b"\n".join(lines), space=space, user=user, source=source)
        result = self._wait(job["job_id"])
        summary = ImportSummary(result["added"], result["present"], tuple((n, r) for n, r in result["bad"]))
        if on_bad is not None:
            for n, reason in summary.bad:
                on_bad(n, reason)
        if progress is not None:
            progress(result["rows"])
        return summary

    def reembed(self, progress: Progress | None = None) -> tuple[int, str]:
        result = self._wait(self._call("POST", "/api/v1/admin/reembed")["job_id"])
        if progress is not None:
            progress(result["count"])
        return result["count"], result["model"]

    def _wait(self, job_id: str) -> dict:
        """Poll an admin job until it is done; its result, or its error as a MemgateError."""
        while True:
            job = self.client.call("GET", f"/api/v1/admin/jobs/{_seg(job_id)}")
            if job["status"] == "done":
                return job["result"]
            if job["status"] == "failed":
                raise GatewayCallError(f"the gateway's {job['kind']} job failed: {job['error']}")
            time.sleep(JOB_POLL_S)


def _seg(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")
