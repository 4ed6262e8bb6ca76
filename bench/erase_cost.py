"""What it costs to leave nothing on disk (issue 35): the DuckDB rewrite at 10k and 100k memories.

A DuckDB file with `--rows` memories (384-d vectors, a chat-length text, its keyword tokens)
spread over `--spaces` spaces, a queued turn per ten memories, and the keyword index built, like
a gateway's after months. Then, as the product does them:

- forget: one memory forgotten (the transaction), then the background rewrite of the file;
- erase: one space (rows / spaces memories) erased (the transaction over every table), then the
  rewrite at once;
- writes held: how long the rewrite holds writes back (the copy and the swap; reads go on during
  the copy), and reads held: the swap alone (close, rename, open), the parts a gateway's replies
  can wait on.

Prints one row per size: seconds for each step, the file before and after. Nothing is asserted.

    python bench/erase_cost.py [--rows 10000 100000] [--spaces 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memory.erase import erase_spaces  # noqa: E402
from memory.forget import forget  # noqa: E402
from memory.store.compact import rewrite  # noqa: E402
from memory.store.connection import Store  # noqa: E402
from memory.store.keywords import rebuild_index  # noqa: E402

WORDS = ("garden tomato fence kitchen herbs basil parsley thyme beans harvest sister Lisbon Porto train ticket "
         "dentist Tuesday budget invoice holiday cat Miso birthday cake recipe flour oven guitar lesson").split()


def seed(store: Store, rows: int, spaces: int) -> None:
    """`rows` memories over `spaces` spaces, in SQL (random unit-ish vectors, varied chat text)."""
    words = "[" + ",".join(f"'{w}'" for w in WORDS) + "]"

    def write(c) -> None:
        c.execute("INSERT INTO spaces SELECT 'u_' || i, 'user', 'person ' || i, now() FROM range(?) t(i)", [spaces])
        c.execute(f"""
            INSERT INTO memories (id, space_id, kind, role, title, text, search_text, content_hash, embedding, created_at,
                                  updated_at, session_id, turn_id)
            SELECT 'm_' || i, 'u_' || (i % {spaces}), CASE WHEN i % 3 = 0 THEN 'fact' ELSE 'chunk' END, 'user',
                   'note ' || i, txt, lower(txt), md5(txt),
                   list_transform(range(384), x -> (random() - 0.5)::FLOAT)::FLOAT[384], now(), now(),
                   's_' || (i // 20), 't_' || (i // 2)
            FROM (SELECT i, 'I told you about the ' || list_extract({words}, 1 + i % {len(WORDS)}) || ' and the '
                          || list_extract({words}, 1 + (i * 7) % {len(WORDS)}) || ' on day ' || i
                          || ': we said it matters because of the ' || list_extract({words}, 1 + (i * 13) % {len(WORDS)})
                          || ', remember number ' || i AS txt FROM range(?) t(i))""", [rows])
        c.execute("""INSERT INTO ingest_queue (id, space_id, session_id, turn_id, payload, status, next_attempt_at, created_at)
                     SELECT 'q_' || i, 'u_' || (i % ?), 's', 't_' || i,
                            '{"messages": [{"role": "user", "text": "turn ' || i || ' about the garden"}]}', 'done', now(), now()
                     FROM range(?) t(i)""", [spaces, rows // 10])

    store.write(write)
    rebuild_index(store)
    store.write(lambda c: c.execute("CHECKPOINT"))


def measure(rows: int, spaces: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="memgate-erase-cost-") as tmp:
        db = Path(tmp) / "memgate.duckdb"
        store = Store(db, 384)
        try:
            t = time.perf_counter()
            seed(store, rows, spaces)
            out = {"seed_s": time.perf_counter() - t, "bytes": db.stat().st_size}
            now = datetime.now(UTC)

            t = time.perf_counter()
            store.write(lambda c: forget(c, ["m_7"], ["u_7"], now))
            out["forget_s"] = time.perf_counter() - t
            stages: dict[str, float] = {}
            res = rewrite(store, stage=lambda s: stages.setdefault(s, time.perf_counter()))
            out["rewrite_s"] = res.seconds
            out["writes_held_s"], out["reads_held_s"] = stages["swapped"] - stages["copying"], stages["swapped"] - stages["swapping"]

            t = time.perf_counter()
            done = store.write(lambda c: erase_spaces(c, ["u_3"], _no_rules()))
            out["erase_sql_s"] = time.perf_counter() - t
            out["erased_rows"] = sum(done.rows.values())
            res = rewrite(store)
            out["erase_rewrite_s"] = res.seconds
            out["bytes_after"] = res.bytes_after
        finally:
            store.close()
    return out


def _no_rules():
    from memory.erase import EraseRules

    return EraseRules()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--spaces", type=int, default=100)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    head = ("memories", "file MB", "forget s", "rewrite s", "writes held s", "reads held s", "erase SQL s", "rows erased",
            "erase rewrite s", "file after MB")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for n in args.rows:
        m = measure(n, args.spaces)
        print(" | ".join([f"{n:,}", f"{m['bytes'] / 1e6:.1f}", f"{m['forget_s']:.3f}", f"{m['rewrite_s']:.2f}",
                          f"{m['writes_held_s']:.2f}", f"{m['reads_held_s']:.2f}", f"{m['erase_sql_s']:.2f}", f"{m['erased_rows']:,}",
                          f"{m['erase_rewrite_s']:.2f}", f"{m['bytes_after'] / 1e6:.1f}"]), flush=True)


if __name__ == "__main__":
    main()
