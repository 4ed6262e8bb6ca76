"""Evidence recall of memgate's production recall path on LoCoMo-format conversations.

Raw-mode ingest of every turn (a chunk each, created_at = its session's date, image captions
appended), then every question with evidence through Recaller.search with the default
settings, "now" = one day after the last session. Prints recall@5/10/25 per category and
overall, recall latency, injected-block tokens, and ends with `overall R@10 = NN.N`.

    python bench/recall_locomo.py [--data ../shared/eval/locomo-dev.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.progress import progress, require_file  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from memory.store.keywords import rebuild_index  # noqa: E402
from memory.ingest.raw import RawMessage, index_text, store_raw  # noqa: E402
from memory.recall.block import render_block  # noqa: E402
from memory.recall.search import Recaller, RecallSettings  # noqa: E402
from memory.store.backend import open_store  # noqa: E402
from memory.store.connection import Store  # noqa: E402
from memory.text import estimate_tokens, search_text  # noqa: E402

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (5, 10, 25)
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def category_names(data: list[dict]) -> dict[int, str]:
    """The data's own category names (a sample's `category_names`), else LoCoMo's."""
    names: dict[int, str] = {}
    for conv in data:
        names |= {int(k): str(v) for k, v in (conv.get("category_names") or {}).items()}
    return names or dict(LOCOMO_CATEGORIES)


def parse_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def normalise_evidence(raw: list[str], known: set[str]) -> list[str]:
    """Split multi-id strings, repair malformed ids ("D:11:26", "D30:05"), drop unknown ones."""
    out: list[str] = []
    for item in raw:
        for a, b in _EVIDENCE.findall(str(item)):
            did = f"D{int(a)}:{int(b)}"
            if did in known and did not in out:
                out.append(did)
    return out


def load_turns(conv: dict, space: str) -> tuple[list[RawMessage], dict[str, str], datetime]:
    """Every turn as a RawMessage; returns them, turn_id -> dia_id, and the last session's date."""
    c = conv["conversation"]
    sessions = sorted(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k) and c[k])
    msgs: list[RawMessage] = []
    last = datetime(2000, 1, 1)
    prev_text = prev_speaker = None
    for n in sessions:
        start = parse_date(c[f"session_{n}_date_time"])
        last = max(last, start)
        prev_text = prev_speaker = None  # context never crosses a session
        for i, turn in enumerate(c[f"session_{n}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            msgs.append(RawMessage(space_id=space, role="user", text=text, speaker=turn["speaker"],
                                   created_at=start + timedelta(seconds=30 * i), session_id=f"{space}:S{n}",
                                   turn_id=turn["dia_id"], context=prev_text, context_speaker=prev_speaker))
            prev_text, prev_speaker = text, turn["speaker"]
    return msgs, {m.turn_id: m.turn_id for m in msgs}, last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/eval/locomo-dev.json"))
    ap.add_argument("--limit-questions", type=int, default=0, help="only the first N questions per conversation (smoke runs)")
    ap.add_argument("--half-life", type=float, default=None, help="override the decay half-life (ablation)")
    ap.add_argument("--floor", type=float, default=None, help="override the decay floor (ablation)")
    ap.add_argument("--mmr", type=float, default=None, help="override MMR lambda (ablation)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any RecallSettings field (ablation)")
    ap.add_argument("--db", default=None, help="keep the ingested database here and reuse it (ablations)")
    ap.add_argument("--store", default=None, metavar="URL",
                    help="run on this store instead (postgresql://user@host/db; reused when it already holds the sample)")
    ap.add_argument("--retokenize", action="store_true",
                    help="with --db: recompute the chunks' BM25 text with today's tokenizer (no re-embedding)")
    ap.add_argument("--dump", default=None, help="write one JSON line per question (category, gold, found ids)")
    args = ap.parse_args(argv)

    data = json.loads(require_file(args.data, "locomo10.json").read_text())
    settings = RecallSettings()
    if args.half_life is not None:
        settings = replace(settings, half_life_days=args.half_life)
    if args.floor is not None:
        settings = replace(settings, decay_floor=args.floor)
    if args.mmr is not None:
        settings = replace(settings, mmr_lambda=args.mmr)

    for item in args.set:
        key, value = item.split("=", 1)
        current = getattr(settings, key)
        parsed = value.lower() in ("1", "true", "yes", "on") if isinstance(current, bool) else type(current)(value)
        settings = replace(settings, **{key: parsed})
    tmp = tempfile.TemporaryDirectory()
    if args.store:
        store = open_store(args.store, 384)
        reuse = bool(store.read(lambda c: c.execute("SELECT count(*) FROM memories").fetchone()[0]))
    else:
        db = Path(args.db) if args.db else Path(tmp.name) / "bench.duckdb"
        reuse = db.exists()
        store = Store(db, 384)
    embedder = LocalE5Embedder()
    recaller = Recaller(store, embedder, settings)

    t0 = time.perf_counter()
    convs = []
    n_turns = 0
    for conv in progress(data, "ingest (conversations)"):
        space = f"locomo:{conv['sample_id']}"
        msgs, _, last = load_turns(conv, space)
        if not reuse:
            store_raw(store, embedder, msgs, dedup=False)
        n_turns += len(msgs)
        convs.append((conv, space, {m.turn_id for m in msgs}, last))
    if reuse and args.retokenize:
        retokenize(store, numbers=settings.normalise_numbers, bigrams=settings.cjk_bigrams)
    if not reuse or args.retokenize:
        rebuild_index(store)
    ingest_s = time.perf_counter() - t0

    per_cat: dict[int, dict[int, list[float]]] = {}
    dump = open(args.dump, "w") if args.dump else None
    latencies: list[float] = []
    block_tokens: list[int] = []
    for conv, space, known, last in progress(convs, "questions (conversations)"):
        now = last + timedelta(days=1)
        qas = [q for q in conv["qa"] if normalise_evidence(q.get("evidence", []), known)]
        if args.limit_questions:
            qas = qas[: args.limit_questions]
        for qa in qas:
            gold = normalise_evidence(qa["evidence"], known)
            t = time.perf_counter()
            hits = recaller.search(qa["question"], [space], limit=max(KS), now=now)
            latencies.append(recaller.last_timing.search_ms)
            _ = t
            block_tokens.append(estimate_tokens(render_block(hits[: settings.inject_items], now)))
            # A fact or summary counts the turns it was derived from; a chunk is its own turn.
            turn_of = _turn_ids(store, [h for h in hits])
            if dump is not None:
                dump.write(json.dumps({"q": qa["question"], "cat": qa["category"], "gold": gold,
                                       "top": [t for h in hits for t in turn_of.get(h.id, ())]}, ensure_ascii=False) + "\n")
            for k in KS:
                found: set[str] = set()
                for h in hits[:k]:
                    found.update(turn_of.get(h.id, ()))
                per_cat.setdefault(qa["category"], {kk: [] for kk in KS})[k].append(len(found & set(gold)) / len(gold))

    names = category_names(data)
    print(f"\nLoCoMo-format evidence recall ({len(data)} conversations, {n_turns} turns, "
          f"{sum(len(v[5]) for v in per_cat.values())} questions with evidence)")
    print(f"raw ingest: {n_turns / ingest_s:.0f} turns/s (embedding included)")
    print(f"settings: half-life {settings.half_life_days} d, floor {settings.decay_floor}, MMR {settings.mmr_lambda}")
    print(f"{'category':<18}{'n':>6}" + "".join(f"{'R@' + str(k):>9}" for k in KS))
    allv = {k: [] for k in KS}
    for cat in sorted(per_cat):
        row = per_cat[cat]
        for k in KS:
            allv[k].extend(row[k])
        print(f"{names.get(cat, str(cat)):<18}{len(row[5]):>6}" + "".join(f"{100 * statistics.mean(row[k]):>9.1f}" for k in KS))
    print(f"{'overall':<18}{len(allv[5]):>6}" + "".join(f"{100 * statistics.mean(allv[k]):>9.1f}" for k in KS))
    lat = sorted(latencies)
    print(f"recall latency (query embedding excluded): p50 {lat[len(lat) // 2]:.1f} ms, p95 {lat[int(len(lat) * 0.95)]:.1f} ms")
    print(f"injected block: mean {statistics.mean(block_tokens):.0f} tokens (at most {settings.inject_items} items, {settings.inject_tokens} budget)")
    print(f"overall R@10 = {100 * statistics.mean(allv[10]):.1f}")
    if dump is not None:
        dump.close()
    store.close()
    tmp.cleanup()
    return 0


def retokenize(store: Store, numbers: bool = True, bigrams: bool = False) -> None:
    """The chunks' search_text as raw ingest would write it today (index_text, tokenize)."""
    rows = store.read(lambda c: c.execute("SELECT id, text, speaker, created_at FROM memories WHERE kind = 'chunk'").fetchall())
    fresh = [(search_text(index_text(t, sp, at), numbers=numbers, bigrams=bigrams), i) for i, t, sp, at in rows]
    store.write(lambda c: c.executemany("UPDATE memories SET search_text = ? WHERE id = ?", fresh))


def _turn_ids(store: Store, hits) -> dict[str, tuple[str, ...]]:
    """Map each hit to the dia_ids of the chunks behind it (chunks store the dia_id as turn_id)."""
    sources = {s for h in hits for s in h.source_ids}
    if not sources:
        return {}
    rows = store.read(lambda c: c.execute("SELECT id, turn_id FROM memories WHERE id IN (SELECT unnest(?))",
                                          [list(sources)]).fetchall())
    turn = dict(rows)
    return {h.id: tuple(turn[s] for s in h.source_ids if s in turn) for h in hits}


if __name__ == "__main__":
    raise SystemExit(main())
