"""API jobs: a turn posted to the API is a row of the same durable ingest queue chat turns use
(its job id is the turn id), an import is a row of `api_jobs`. Both read back as one status.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from memory.erase import Dependent, EraseRules
from memory.store.connection import Conn
from memory.store.rows import utc_naive
from memory.store.schema import Migration

JobStatus = Literal["queued", "running", "done", "failed"]
ADMIN_SPACE = "(admin)"  # the space_id of an operator's job that spans spaces (import of a whole file, reembed)

# What an operator's job reports when done (an import's counts and bad lines, a reembed's model):
# a side table, because DuckDB 1.5.5 cannot replay an uncheckpointed ALTER TABLE on api_jobs.
JOB_MIGRATIONS = (Migration(540, "api job results", """
    CREATE TABLE api_job_results (job_id VARCHAR PRIMARY KEY, result VARCHAR NOT NULL);
"""),)
# api_jobs has a space_id (memory.erase finds it); a job's saved result goes with its job.
JOB_ERASE = EraseRules(dependents=(Dependent("api_job_results", "job_id IN (SELECT id FROM api_jobs WHERE space_id = $space)"),))


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    kind: str                       # ingest | import
    status: JobStatus
    memory_ids: tuple[str, ...]
    error: str | None
    created_at: datetime

    def as_json(self) -> dict:
        return {"job_id": self.id, "kind": self.kind, "status": self.status, "memory_ids": list(self.memory_ids),
                "error": self.error, "created_at": self.created_at.isoformat()}


def _queue_status(status: str, attempts: int) -> JobStatus:
    """pending and never tried = queued; pending after a failed try = running (it is retried);
    done, or stored raw after its retries (still findable), = done."""
    if status == "pending":
        return "running" if attempts else "queued"
    return "done"


def load_job(con: Conn, space_id: str, job_id: str) -> Job | None:
    """The job of this space with this id, or None (another space's job is not found either)."""
    row = con.execute("""SELECT status, attempts, last_error, created_at FROM ingest_queue
                         WHERE space_id = ? AND turn_id = ?""", [space_id, job_id]).fetchone()
    if row is not None:
        status = _queue_status(row[0], row[1])
        ids: tuple[str, ...] = ()
        if status == "done":
            ids = tuple(r[0] for r in con.execute(
                """WITH chunks AS (SELECT id FROM memories WHERE space_id = $s AND turn_id = $t)
                   SELECT id FROM chunks
                   UNION SELECT DISTINCT f.fact_id FROM fact_sources f JOIN memories m ON m.id = f.fact_id
                         WHERE f.chunk_id IN (SELECT id FROM chunks) AND m.space_id = $s
                   ORDER BY 1""", {"s": space_id, "t": job_id}).fetchall())
        return Job(job_id, "ingest", status, ids, row[2] if status != "done" else None, row[3])
    row = con.execute("SELECT kind, status, memory_ids, error, created_at FROM api_jobs WHERE space_id = ? AND id = ?",
                      [space_id, job_id]).fetchone()
    if row is None:
        return None
    return Job(job_id, row[0], row[1], tuple(row[2] or ()), row[3], row[4])


def recent_jobs(con: Conn, limit: int = 50) -> list[dict]:
    """The latest API and ingest jobs of every space (admin view)."""
    rows = con.execute("""
        SELECT * FROM (
            SELECT turn_id, space_id, 'ingest', CASE WHEN status = 'pending' AND attempts = 0 THEN 'queued'
                   WHEN status = 'pending' THEN 'running' ELSE 'done' END, last_error, created_at
            FROM ingest_queue
            UNION ALL SELECT id, space_id, kind, status, error, created_at FROM api_jobs)
        ORDER BY created_at DESC LIMIT ?""", [limit]).fetchall()
    return [{"job_id": r[0], "space_id": r[1], "kind": r[2], "status": r[3], "error": r[4],
             "created_at": r[5].isoformat()} for r in rows]


def start_job(con: Conn, job_id: str, space_id: str, kind: str, now: datetime) -> None:
    con.execute("INSERT INTO api_jobs VALUES (?, ?, ?, 'queued', ?, NULL, ?, ?)",
                [job_id, space_id, kind, [], utc_naive(now), utc_naive(now)])


def finish_job(con: Conn, job_id: str, status: JobStatus, memory_ids: list[str], error: str | None,
               now: datetime) -> None:
    con.execute("UPDATE api_jobs SET status = ?, memory_ids = ?, error = ?, updated_at = ? WHERE id = ?",
                [status, memory_ids, error, utc_naive(now), job_id])


def queue_depth_and_age(con: Conn, now: datetime) -> tuple[int, float]:
    """Pending ingest turns of every space and the age in seconds of the oldest (for /metrics)."""
    depth, oldest = con.execute("SELECT count(*), min(created_at) FROM ingest_queue WHERE status = 'pending'").fetchone()
    return depth, (utc_naive(now) - oldest).total_seconds() if oldest is not None else 0.0


def save_result(con: Conn, job_id: str, result: dict) -> None:
    import json

    con.execute("INSERT INTO api_job_results VALUES (?, ?) ON CONFLICT (job_id) DO UPDATE SET result = excluded.result",
                [job_id, json.dumps(result, ensure_ascii=False)])


def admin_job(con: Conn, job_id: str) -> dict | None:
    """An operator's job (any space) with its result: what `memgate memory import` and `reembed` poll."""
    import json

    row = con.execute("""SELECT j.kind, j.status, j.error, r.result FROM api_jobs j
                         LEFT JOIN api_job_results r ON r.job_id = j.id WHERE j.id = ?""", [job_id]).fetchone()
    if row is None:
        return None
    return {"job_id": job_id, "kind": row[0], "status": row[1], "error": row[2],
            "result": json.loads(row[3]) if row[3] else None}

