"""HTTP API load: search and list latency (p50/p95) over real HTTP at 10k memories in one space,
and ingest jobs per second (POST a turn -> 202 -> poll until done), against a real gateway App.

The 10k memories are built like bench/recall_scale.py builds its 10k space (distinct clauses
embedded once with the real model, messages composed from them, bulk raw insert), next to 20k rows
of other spaces; the keyword index is rebuilt before measuring, as the scheduler would.

    python bench/api_load.py [--memories 10000] [--requests 200] [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402

from bot.app import build_app, open_store  # noqa: E402
from bot.settings import ApiConfig, Settings  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from memory.store.keywords import rebuild_index  # noqa: E402
from recall_scale import ClausePool, bulk_insert, questions  # noqa: E402

SPACE = "bench:user"


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else float("nan")


def build(settings: Settings, embedder: LocalE5Embedder, n: int, seed: int) -> float:
    store = open_store(settings)
    try:
        t0 = time.perf_counter()
        pool = ClausePool(random.Random(seed), embedder, 1500)
        bulk_insert(store, pool, np.random.default_rng(seed), [(SPACE, n), ("bench:other1", 10_000), ("bench:other2", 10_000)])
        rebuild_index(store)
        store.write(lambda c: c.execute("INSERT OR IGNORE INTO spaces VALUES (?, 'user', NULL, now())", [SPACE]))
        return time.perf_counter() - t0
    finally:
        store.close()


async def timed(http: aiohttp.ClientSession, path: str, headers: dict) -> float:
    t0 = time.perf_counter()
    async with http.get(path, headers=headers) as r:
        await r.read()
        assert r.status == 200, (path, r.status)
    return (time.perf_counter() - t0) * 1000


async def measure(settings: Settings, embedder: LocalE5Embedder, requests: int, turns: int, seed: int) -> dict:
    app = build_app(settings, embedder=embedder, serve_api=True)
    rng = random.Random(seed)
    out: dict = {}
    async with app:
        key = app.extras["api"].keys.create("write", SPACE)[0]
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession(base_url=app.extras["api"].url) as http:
            async with http.get("/api/v1/memories?limit=1", headers=headers) as r:
                out["total"] = (await r.json())["total"]
            qs = questions(rng, requests)
            await timed(http, "/api/v1/memories?" + urlencode({"q": qs[0]}), headers)  # warm the model and caches
            out["search"], out["embed"], out["recall"] = [], [], []
            for q in qs:
                out["search"].append(await timed(http, "/api/v1/memories?" + urlencode({"q": q}), headers))
                # The server runs in this process: recall's own split of the request just made.
                t = app.engine.recaller.last_timing
                out["embed"].append(t.embed_ms)
                out["recall"].append(t.search_ms)
            pages = [f"/api/v1/memories?limit=50&offset={rng.randrange(0, max(1, out['total'] - 50))}" for _ in range(requests)]
            pages += [f"/api/v1/memories?limit=50&kind=chunk&since=2025-0{rng.randint(1, 9)}-01" for _ in range(requests // 4)]
            out["list"] = [await timed(http, p, headers) for p in pages]
            t0 = time.perf_counter()
            jobs = []
            for i in range(turns):
                body = {"messages": [{"role": "user", "content": f"load turn {i}: I went to the market with Ana"},
                                     {"role": "assistant", "content": f"Noted, turn {i}."}], "session_id": "bench"}
                async with http.post("/api/v1/memories", json=body, headers=headers) as r:
                    assert r.status == 202
                    jobs.append((await r.json())["job_id"])
            accepted = time.perf_counter() - t0
            # One space's turns are ingested in order: wait on the oldest job not yet done, so the
            # polling (one request at a time) does not compete with the ingestion it measures.
            for j in jobs:
                while True:
                    async with http.get(f"/api/v1/jobs/{j}", headers=headers) as r:
                        if (await r.json())["status"] == "done":
                            break
                    await asyncio.sleep(0.05)
            out["ingest_s"] = time.perf_counter() - t0
            out["accept_s"] = accepted
            out["turns"] = turns
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=10_000, help="memories in the measured space")
    ap.add_argument("--requests", type=int, default=200, help="search and list requests each")
    ap.add_argument("--turns", type=int, default=200, help="turns posted for the ingest figure")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    embedder = LocalE5Embedder()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=tmp, api=ApiConfig(port=0, rate_limit_per_minute=1e6, rate_limit_burst=100_000))
        built = build(settings, embedder, args.memories, args.seed)
        print(f"built {args.memories} memories in {SPACE} (+20k in other spaces) in {built:.0f} s")
        r = asyncio.run(measure(settings, embedder, args.requests, args.turns, args.seed))
    print(f"\nHTTP API over loopback, {r['total']} memories in the key's space (raw ingest, no LLM)\n")
    print(f"{'operation':<34}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}")
    print(f"{'GET /memories?q= (hybrid recall)':<34}{len(r['search']):>6}{pct(r['search'], 50):>10.1f}{pct(r['search'], 95):>10.1f}")
    print(f"{'  of which: query embedding':<34}{len(r['embed']):>6}{pct(r['embed'], 50):>10.1f}{pct(r['embed'], 95):>10.1f}")
    print(f"{'  of which: recall SQL + ranking':<34}{len(r['recall']):>6}{pct(r['recall'], 50):>10.1f}{pct(r['recall'], 95):>10.1f}")
    print(f"{'GET /memories (page, filters)':<34}{len(r['list']):>6}{pct(r['list'], 50):>10.1f}{pct(r['list'], 95):>10.1f}")
    print(f"\n{'ingest':<34}{'turns':>6}{'jobs/s':>10}{'accept/s':>10}")
    print(f"{'POST turn -> 202 -> job done':<34}{r['turns']:>6}{r['turns'] / r['ingest_s']:>10.1f}"
          f"{r['turns'] / r['accept_s']:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
