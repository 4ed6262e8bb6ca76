"""The operator through a running gateway: each call of the Operator protocol is one request to
its admin API (routes in bot.api.routes_operator and routes_admin) with the gateway's local token,
answered in bot.operator.protocol's wire format. Imports, like that module, no database, embedding
model or LLM library.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from bot.access.api_key_views import ApiKey
from bot.access.erase_views import ErasePlan, plan_from_json
from bot.errors import ConfigError
from bot.job_views import JobStatus, QueueStatus
from bot.operator.gateway_client import GatewayCallError, GatewayClient
from bot.operator.protocol import (
    ImportSummary,
    MemoryLine,
    OnBad,
    PendingLine,
    Person,
    Progress,
    job_from_json,
    key_from_json,
    line_from_json,
    person_from_json,
    queue_from_json,
)

JOB_POLL_S = 0.2  # a job's status is one indexed read: polling often costs the gateway nothing


class RemoteOperator:
    """A gateway is running: ask its admin API (routes in bot.api.routes_operator and routes_admin)."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client

    def now(self) -> datetime:
        return datetime.fromisoformat(self.client.call("GET", "/api/v1/admin/clock")["now"])

    def pending(self) -> list[PendingLine]:
        return [PendingLine(r["code"], r["identity"], r["display_name"])
                for r in self.client.call("GET", "/api/v1/admin/pairing")["requests"]]

    def approve(self, code: str) -> Person:
        return person_from_json(self.client.call("POST", f"/api/v1/admin/pairing/{_seg(code.upper())}/approve")["approved"])

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

    def public_add(self, text: str) -> str:
        return self.client.call("POST", "/api/v1/admin/public/memories", {"content": text})["id"]

    def public_edit(self, memory_id: str, text: str) -> str | None:
        try:
            return self.client.call("PATCH", f"/api/v1/admin/public/memories/{_seg(memory_id)}", {"text": text})["id"]
        except GatewayCallError as exc:
            if exc.status == 404:
                return None
            raise

    def public_forget(self, memory_id: str) -> bool:
        try:
            self.client.call("DELETE", f"/api/v1/admin/public/memories/{_seg(memory_id)}")
        except GatewayCallError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def erase_plan(self, space: str | None, user: str | None) -> ErasePlan:
        return plan_from_json(self._call("GET", "/api/v1/admin/erase", space=space, user=user))

    def erase(self, space: str | None, user: str | None) -> ErasePlan:
        return plan_from_json(self._call("POST", "/api/v1/admin/erase", {"space": space, "user": user}))

    def queue(self) -> QueueStatus:
        return queue_from_json(self.client.call("GET", "/api/v1/admin/queue"))

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
