"""Memory Pulse: one space's activity over time, counted in SQL (day or week buckets, each split
by kind and by category, empty buckets included), plus its top tags."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from memory.store.connection import Conn
from memory.store.dialect import dialect_of
from memory.store.rows import utc_naive

Bucket = Literal["day", "week"]


@dataclass(frozen=True, slots=True)
class PulseBucket:
    start: datetime
    count: int
    by_kind: dict[str, int] = field(default_factory=dict)
    by_category: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pulse:
    buckets: tuple[PulseBucket, ...]
    top_tags: tuple[tuple[str, int], ...]
    total: int


def pulse(con: Conn, space_id: str, since: datetime, until: datetime, bucket: Bucket, top: int = 10) -> Pulse:
    """Active memories created in [since, until) of one space, bucketed by day or week."""
    step = "INTERVAL '7 days'" if bucket == "week" else "INTERVAL '1 day'"
    slots = dialect_of(con).series("date_trunc($b, $since::TIMESTAMP)", "$until::TIMESTAMP", step)
    params = {"s": space_id, "since": utc_naive(since), "until": utc_naive(until), "b": bucket}
    rows = con.execute(f"""
        WITH mine AS (
            SELECT date_trunc($b, created_at) AS start, kind, coalesce(category, 'none') AS category
            FROM memories WHERE space_id = $s AND status = 'active' AND created_at >= $since AND created_at < $until),
        slots AS ({slots}),
        parts AS (
            SELECT start, 'kind' AS axis, kind AS name, count(*) AS n FROM mine GROUP BY 1, 2, 3
            UNION ALL SELECT start, 'category', category, count(*) FROM mine GROUP BY 1, 2, 3)
        SELECT s.start, p.axis, p.name, p.n FROM slots s LEFT JOIN parts p ON p.start = s.start
        ORDER BY s.start, p.axis, p.name""", params).fetchall()
    by_start: dict[datetime, PulseBucket] = {}
    for start, axis, name, n in rows:
        b = by_start.setdefault(start, PulseBucket(start, 0))
        if axis == "kind":
            b.by_kind[name] = n
        elif axis == "category":
            b.by_category[name] = n
    buckets = tuple(PulseBucket(b.start, sum(b.by_kind.values()), b.by_kind, b.by_category) for b in by_start.values())
    tags = con.execute("""
        SELECT tag, count(*) FROM (SELECT unnest(tags) AS tag FROM memories WHERE space_id = $s AND status = 'active'
                                   AND created_at >= $since AND created_at < $until) AS t
        GROUP BY tag ORDER BY count(*) DESC, tag LIMIT $top""",
        {"s": space_id, "since": params["since"], "until": params["until"], "top": top}).fetchall()
    return Pulse(buckets, tuple((t, n) for t, n in tags), sum(b.count for b in buckets))
