"""What `memgate jobs` and /jobs show of the background jobs: the status values and their text.

No database and no scheduler here: the command line imports this to print what a running
gateway sent (bot.operator.remote), and must stay quick to start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memory.text import trim


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What `memgate jobs` and `/jobs` show for one job."""

    name: str
    interval: timedelta | None
    last_run: datetime | None
    duration_s: float | None
    last_error: str | None
    next_run: datetime | None
    running: bool
    runs: int = 0
    failures: int = 0
    last_ok: datetime | None = None


def _when(dt: datetime | None) -> str:
    if dt is not None and dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)  # stored and shown as naive UTC
    return "never" if dt is None else f"{dt:%Y-%m-%d %H:%M}"


def format_duration(seconds: float | None) -> str:
    """'0.4s', '12s', '3m05s', '2h01m'; '-' for None."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_interval(interval: timedelta | None) -> str:
    """'every 5m', 'every 2h', 'every 1d'; '' for None."""
    if interval is None:
        return ""
    s = int(interval.total_seconds())
    if s % 86400 == 0:
        return f"every {s // 86400}d"
    if s % 3600 == 0:
        return f"every {s // 3600}h"
    if s % 60 == 0:
        return f"every {s // 60}m"
    return f"every {s}s"


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """The turns waiting to become memory, as /healthz and `memgate jobs` report them."""

    waiting: int
    oldest: datetime | None         # when the oldest waiting turn was captured (naive UTC)
    now: datetime


def format_queue(q: QueueStatus) -> str:
    """'Ingest queue: 3 turns waiting to become memory, the oldest 2h05m old.'"""
    if not q.waiting:
        return "Ingest queue: no turn waiting to become memory."
    age = ""
    if q.oldest is not None:
        now = q.now.astimezone(UTC).replace(tzinfo=None) if q.now.tzinfo is not None else q.now
        age = f", the oldest {format_duration(max(0.0, (now - q.oldest).total_seconds()))} old"
    return f"Ingest queue: {q.waiting} turn{'' if q.waiting == 1 else 's'} waiting to become memory{age}."


def format_jobs(statuses: Sequence[JobStatus]) -> str:
    """`memgate jobs` and /jobs: each job's schedule, last run, duration, next run and last error."""
    if not statuses:
        return "No scheduled jobs."
    lines = ["Jobs:"]
    for j in statuses:
        state = "running" if j.running else ("failed" if j.last_error else ("ok" if j.last_run else "not run yet"))
        head = f"- {j.name} ({format_interval(j.interval)})" if j.interval else f"- {j.name}"
        lines.append(f"{head}: {state}; last {_when(j.last_run)} took {format_duration(j.duration_s)}; "
                     f"next {_when(j.next_run) if j.next_run is not None else 'when a gateway runs'}; "
                     f"runs {j.runs}, failures {j.failures}")
        if j.last_error:
            lines.append(f"    error: {trim(j.last_error, 200)}")
    return "\n".join(lines)
