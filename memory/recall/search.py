"""Hybrid recall (DESIGN section 5): vector + BM25 candidates over every memory kind, fused
with RRF, boosted for pins, decayed by age, diversified with MMR, cut and normalised.

The allowed spaces are always a SQL filter. When the embedder fails, recall degrades to
keywords only; when everything fails, it returns nothing and logs a warning (memory trouble
never blocks a reply).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from memory.recall import ranking
from memory.recall import calibration
from memory.recall.calibration import Signals
from memory.recall.query import time_span, wants_many
from memory.embed import Embedder
from memory.store.keywords import keyword_search
from memory.store.rows import utc_naive
from memory.store.row_cache import RECALL_COLUMNS, rows_for
from memory.store.connection import Conn, Store
from memory.text import STOPWORDS, has_cjk, query_terms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecallSettings:
    """Recall parameters; defaults from DESIGN section 5."""

    candidate_factor: int = 5
    min_candidates: int = 30
    fusion: str = "convex"          # convex | rrf (DESIGN's RRF; convex measured better, see ranking.py)
    keyword_weight: float = 0.5     # convex: share of the keyword score
    # ... x min(1, keyword_terms / the query's terms): a long query (a dialogue's words) sums many
    # weak matches of common words in BM25, while its vector keeps the gist. 0 = off: 16 moved
    # MADial R@10 en 75.4 -> 75.0, zh 69.5 -> 70.8 (R@block +3.2 / -0.7), mixed, not kept.
    keyword_terms: int = 0
    rrf_k: int = 60
    pinned_boost: float = 1.5
    speaker_boost: float = 0.15     # memories said by someone the query names
    mmr_lambda: float = 0.7
    half_life_days: float = 14.0
    # MemOS uses a 0.3 floor; with it a months-old exact answer loses to yesterday's small talk
    # (LoCoMo R@10 66% vs 73% without decay). 0.95 keeps recency a tie-breaker: newer wins among
    # equally relevant memories, relevance wins otherwise. 0.8 still cost relevance (issue 23,
    # R@10 0.8 -> 0.95: MADial-en +0.1, MADial-zh +0.9, CrossWOZ-zh 0, LoCoMo conv-26/41 0;
    # no decay at all is +0.6 on LoCoMo but drops the tie-breaker; bench/RESULTS-recall.md).
    decay_floor: float = 0.95
    cutoff: float = 0.3
    inject_items: int = 6
    inject_tokens: int = 800
    inject_skills: int = 2
    search_default: int = 10
    search_max: int = 20
    fold_overlap: float = 0.7
    # A count or list query ("how many", 哪些, 一共): this many times the candidates, and MMR over
    # what the memories are about (their words outside the query) instead of their vectors.
    many_factor: int = 2
    many_mmr_lambda: float = 0.7
    # ...and the second step starts from this many best hits (a list's items each have neighbours).
    many_expand_top: int = 5
    many_expand_add: float = 0.0    # a list's hits are its items: their neighbours only name them
    # Second step from the first results: the `expand_top` best lend `expand_weight` x their
    # score to the `expand_window` chunks said before and after them in their session, x
    # `expand_decay` per turn beyond the next. A window of 2 reaches the answer to "what is its
    # phone number?" (hit names X, next turn asks, the one after answers): R@10 CrossWOZ-zh
    # 78.3 -> 83.4, LoCoMo 74.5 -> 75.7, no category down (bench/RESULTS-recall.md); without the
    # decay the user's own request (distance 1) lost 2.4 to turns two away.
    expand_top: int = 5
    expand_weight: float = 0.6
    expand_window: int = 2
    expand_decay: float = 0.9
    # A neighbour keeps the larger of its own and its lent score plus this share of the smaller:
    # of two turns next to a hit, the one relevant itself wins. 0.3: R@10 CrossWOZ-zh 83.4 -> 85.6,
    # LoCoMo 75.7 -> 77.0 (temporal +4.4, adversarial +2.1, multi-hop -1.4); 1 (the sum) cost
    # user-request 2.4 (bench/RESULTS-recall.md).
    expand_add: float = 0.3
    # Runs of messages as units: a fact told over a few short messages ("北京饭店" ... "地址是东城区
    # ...") is one unit. A best hit and a neighbour it lends to form a run (with the messages
    # between); the BM25 its words score beyond its best single message's, x `run_gain` / the top
    # keyword score, is added to what the hit lends (and to the hit itself). 1.0: R@10 / R@block
    # CrossWOZ-zh 89.7 / 79.8 -> 90.4 / 80.9 (multi-evidence +4.2), LoCoMo conv-26 82.0 / 75.8 ->
    # 83.5 / 76.1, MADial 0 (one note per session); 0.5 and 2.0 in bench/RESULTS-recall.md.
    run_gain: float = 1.0
    # Session evidence: each chunk pulled towards the best score of its session,
    # (1 - w) * own + w * best; a list/count query by `many_session_weight` (its items are told
    # in different turns of one session too, and pulling them together blurs which match). A fact
    # told over several short messages has its session found by one of them; the others rise
    # above stray hits of other sessions. 0.3 (on decay floor 0.95): R@10 CrossWOZ-zh 84.8 ->
    # 89.4, LoCoMo 78.1 -> 78.3, MADial unchanged (one note per session); 0.3 for lists too cost
    # CrossWOZ multi-evidence 2.4 (bench/RESULTS-recall.md).
    session_weight: float = 0.3
    many_session_weight: float = 0.0
    # Abstain: auto-recall injects nothing when its best hit's calibrated confidence
    # (memory/recall/calibration.py, learned for the local e5 model; other embedders are not
    # calibrated and never abstain) is below this ("猫" found "Hi! My name is Tom Becker." at the
    # top of a store that never spoke of cats). `confident`; 0 = never abstain.
    min_confidence: float = calibration.MIN_CONFIDENCE
    # What the bot said is not what the person said: an assistant message's score x this. 1: 0.8
    # cost CrossWOZ-zh (助手 captured as the assistant) R@10 90.4 -> 89.0, R@block 80.9 -> 76.0
    # (its questions ask what the assistant said); no other dev set has assistant turns. A reply
    # that failed, was cancelled or cut is not stored at all (bot/turn/agent.py).
    assistant_weight: float = 1.0
    # Memories inside the span a query's time words point at ("last week", 上周, 去年): x (1 + boost).
    time_boost: float = 0.3
    # Ablation switches (the bench's `--set`): Chinese question words out of the keyword query,
    # and numbers/dates in both scripts normalised (the index side follows `--retokenize`).
    question_words: bool = True
    normalise_numbers: bool = True
    cjk_bigrams: bool = False


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """One recalled memory, with a score in [0, 1] and the chunks it stands for."""

    id: str
    kind: str
    space_id: str
    title: str
    text: str
    score: float
    created_at: datetime
    pinned: bool = False
    role: str | None = None
    speaker: str | None = None
    category: str | None = None
    source_ids: tuple[str, ...] = field(default=())
    signals: Signals | None = None  # what recall knew of it (memory/recall/calibration.py)
    confidence: float | None = None  # P(it is about the query), when calibrated for the embedder


@dataclass(frozen=True, slots=True)
class RecallTiming:
    embed_ms: float
    search_ms: float


# The columns of a candidate row, in the order `_search` reads them (r[0] .. r[11]; the row
# cache holds them by version).
_ROW_COLUMNS = RECALL_COLUMNS

# Filled with constant IN lists (see fts.sql_strings). Alone, `id IN (...)` is pushed into the
# scan and reads only the matching rows (~2 ms for 100 ids in 130k rows); combined with the
# space filter DuckDB turns it into a join that reads every row (~30 ms). So the ids are looked
# up first (MATERIALIZED keeps the optimizer from merging the filters), then filtered by space
# and status. The sources of facts and tasks are looked up afterwards, for the hits only.
_ROW_SQL = f"""
WITH byid AS MATERIALIZED (
    SELECT {_ROW_COLUMNS}, status FROM memories WHERE id IN ({{ids}})
)
SELECT {_ROW_COLUMNS} FROM byid WHERE space_id IN ({{spaces}}) AND status = 'active'
"""

# Every chunk of the hits' sessions, by the session index (the same two steps as _ROW_SQL: the
# constant `session_id IN` list alone is an index scan; the other filters would make it a scan).
# Only what finds the neighbours: their rows are read afterwards, by seq.
_SESSION_KEYS_SQL = """
WITH bysession AS MATERIALIZED (
    SELECT seq, session_id, created_at, space_id, status, kind, pinned FROM memories WHERE session_id IN ({sessions})
)
SELECT seq, session_id, created_at, pinned FROM bysession WHERE space_id IN ({spaces}) AND status = 'active' AND kind = 'chunk'
"""


class Recaller:
    """Finds the memories that matter for a query, within the spaces a speaker may see."""

    def __init__(self, store: Store, embedder: Embedder, settings: RecallSettings | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings or RecallSettings()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.last_timing = RecallTiming(0.0, 0.0)

    def search(self, query: str, space_ids: Sequence[str], *, limit: int | None = None,
               kinds: Sequence[str] | None = None, now: datetime | None = None) -> list[MemoryHit]:
        """Blocking hybrid search (run it in a thread from async code)."""
        s = self.settings
        limit = max(1, min(limit or s.search_default, 100))
        if not query.strip() or not space_ids:
            return []
        t0 = time.perf_counter()
        qvec: np.ndarray | None
        try:
            qvec = self.embedder.embed_query(query)
        except Exception:
            log.warning("query embedding failed; recall falls back to keywords", exc_info=True)
            qvec = None
        t1 = time.perf_counter()
        n = max(limit * s.candidate_factor, s.min_candidates)
        many = wants_many(query)
        if many:
            n *= max(1, s.many_factor)
        terms = query_terms(query, question_words=s.question_words, numbers=s.normalise_numbers, bigrams=s.cjk_bigrams)
        hits = self.store.read(lambda con: self._search(con, qvec, terms, query, list(space_ids), n, limit, kinds,
                                                        utc_naive(now or self._clock()), many))
        self.last_timing = RecallTiming((t1 - t0) * 1000, (time.perf_counter() - t1) * 1000)
        return hits

    async def asearch(self, query: str, space_ids: Sequence[str], **kw) -> list[MemoryHit]:
        import asyncio

        try:
            return await asyncio.to_thread(self.search, query, space_ids, **kw)
        except Exception:
            log.warning("recall failed; answering without memory", exc_info=True)
            return []

    def _fuse(self, vec: Sequence[tuple[str, float]], kw: Sequence[tuple[str, float]], terms: int = 0) -> dict[str, float]:
        s = self.settings
        if s.fusion == "rrf":
            return ranking.rrf([[d for d, _ in vec], [d for d, _ in kw]], k=s.rrf_k)
        weight = s.keyword_weight * (min(1.0, s.keyword_terms / terms) if s.keyword_terms and terms else 1.0)
        return ranking.convex_fusion(vec, kw, weight)

    # ------------------------------------------------------------------------------------------
    def _search(self, con: Conn, qvec, terms, query_text, spaces, n, limit, kinds, now, many=False) -> list[MemoryHit]:
        # Imported here: this method is the only part of the module that uses them.
        from memory.store.keywords import sql_strings
        from memory.store.postings_cache import index_version_of, postings_for
        from memory.store.vectors import cache_for, fetch_vectors

        s = self.settings
        # The vector side's best rows come from memory unchecked (large spaces) or from SQL; the
        # row fetch below checks them, and `settle` turns them into the exact top n.
        cache = cache_for(self.store)
        proposal = cache.propose(con, qvec, spaces, n, kinds) if qvec is not None else None
        # The vector candidates' rows come in the keyword check's lookup (one round trip, not two).
        stats: dict = {}
        held = rows_for(self.store)
        kw, by_id = keyword_search(con, terms, spaces, n, kinds, _ROW_COLUMNS, postings_for(self.store),
                                   also=proposal.seqs.values() if proposal else (), ids=cache.ids_of, stats_out=stats,
                                   rows=held, version=index_version_of(proposal.meta) if proposal else None)
        by_id = {d: r for d, r in by_id.items() if r[2] in spaces}
        wanted = list(dict.fromkeys(d for d in [*(d for d, _ in (proposal.ranked if proposal else ())), *(d for d, _ in kw)]
                                    if d not in by_id))
        if not wanted and not by_id:
            return []
        if wanted:
            by_id |= {r[0]: r for r in con.execute(_ROW_SQL.format(ids=sql_strings(wanted), spaces=sql_strings(spaces))).fetchall()}
        vec: list[tuple[str, float]] = []
        vectors: dict = {}
        if proposal is not None:
            live = {d for d in proposal.unchecked if d in by_id and (not kinds or by_id[d][1] in kinds)}
            vec, vectors = cache.settle(con, proposal, live, qvec, spaces, n, kinds)
            extra = [d for d, _ in vec if d not in by_id]  # only after a fallback to the checked search
            if extra:
                by_id |= {r[0]: r for r in con.execute(
                    _ROW_SQL.format(ids=sql_strings(extra), spaces=sql_strings(spaces))).fetchall()}
        fused = self._fuse(vec, kw, len(terms))
        if not fused:
            return []
        if s.speaker_boost:
            fused = ranking.speaker_boost(fused, {d: by_id[d][8] for d in fused if d in by_id}, query_text, s.speaker_boost)
        scores: dict[str, float] = {}
        span = time_span(query_text, now) if s.time_boost else None
        for doc, base in fused.items():
            r = by_id.get(doc)
            if r is None:
                continue
            score = base * (s.pinned_boost if r[6] else 1.0)
            if r[7] == "assistant":
                score *= s.assistant_weight
            score *= ranking.time_decay(ranking.age_days(r[5], now), s.half_life_days, s.decay_floor)
            if span is not None and r[5] in span:
                score *= 1.0 + s.time_boost
            scores[doc] = score
        pull = s.many_session_weight if many else s.session_weight
        if pull > 0:
            scores = ranking.session_evidence(scores, {d: by_id[d][10] for d in scores if by_id[d][1] == "chunk"}, pull)
        if s.expand_weight > 0 and s.expand_top > 0 and (not kinds or "chunk" in kinds):
            top = max(s.expand_top, s.many_expand_top) if many else s.expand_top
            best = sorted(scores, key=lambda d: -scores[d])[:top]
            near, rows = _neighbours(con, {d: by_id[d][10] for d in best if by_id[d][1] == "chunk"}, spaces, s.expand_window,
                                     cache.ids_of, held)
            by_id |= {r[0]: r for r in rows if r[0] not in by_id}
            gains = _run_gains(con, near, by_id, stats, kw, s.run_gain, held) if s.run_gain > 0 else {}
            scores = ranking.expand_to_neighbours(scores, near, top, s.expand_weight, s.expand_decay,
                                                  s.many_expand_add if many else s.expand_add, gains)
        if many and s.many_mmr_lambda < 1:
            words = dict(con.execute(f"SELECT id, search_text FROM memories WHERE id IN ({sql_strings(list(scores))})").fetchall())
            order = ranking.content_mmr(scores, {d: frozenset(t.split()) for d, t in words.items()}, limit,
                                        s.many_mmr_lambda, frozenset(terms) | STOPWORDS)
        elif s.mmr_lambda < 1:
            missing = [d for d in scores if d not in vectors]
            vectors |= cache.vectors(missing)
            vectors |= fetch_vectors(con, [d for d in missing if d not in vectors])
            order = ranking.mmr(scores, vectors, limit, s.mmr_lambda)
        else:
            order = sorted(scores, key=lambda d: -scores[d])[:limit]
        kept = ranking.cut_and_normalise([(d, scores[d]) for d in order], s.cutoff)
        signals = _signals(con, kept, qvec, vec, vectors, kw, stats, cache, query_text,
                           {d: f"{by_id[d][8] or ''} {by_id[d][4]}" for d, _ in kept})
        sure = {d: calibration.confidence(sig) for d, sig in signals.items()} \
            if qvec is not None and calibration.calibrated(self.embedder.name) else {}
        # A chunk (or skill) stands for itself; a fact for the chunks it came from; a task
        # summary for its chunks in time order.
        sources: dict[str, tuple[str, ...]] = {d: (d,) for d, _ in kept if by_id[d][1] not in ("fact", "task")}
        facts = [d for d, _ in kept if by_id[d][1] == "fact"]
        tasks = [d for d, _ in kept if by_id[d][1] == "task"]
        if facts:
            sources |= {f: tuple(src) for f, src in con.execute(
                f"SELECT fact_id, array_agg(chunk_id ORDER BY chunk_id) FROM fact_sources WHERE fact_id IN ({sql_strings(facts)}) "
                "GROUP BY fact_id").fetchall()}
        if tasks:
            sources |= {t: tuple(src) for t, src in con.execute(
                f"SELECT task_id, array_agg(id ORDER BY created_at) FROM memories WHERE task_id IN ({sql_strings(tasks)}) "
                "AND kind = 'chunk' GROUP BY task_id").fetchall()}
        return [
            MemoryHit(id=d, kind=by_id[d][1], space_id=by_id[d][2], title=by_id[d][3], text=by_id[d][4],
                      score=round(sc, 4), created_at=by_id[d][5], pinned=by_id[d][6], role=by_id[d][7],
                      speaker=by_id[d][8], category=by_id[d][9], source_ids=sources.get(d, ()), signals=signals.get(d),
                      confidence=sure.get(d))
            for d, sc in kept
        ]


def confident(hits: Sequence[MemoryHit], min_confidence: float) -> bool:
    """Whether auto-recall should inject these hits: some were found, and the best one's
    calibrated confidence (None: not calibrated for the embedder) is at least `min_confidence`.
    The calibration was learned on the best hit of each question (bench/calibrate_recall.py), so
    the decision is the query's, never a cut through its hits (a neighbour that holds the answer
    has a lower cosine than the hit that found it)."""
    if not hits:
        return False
    top = hits[0].confidence
    return min_confidence <= 0 or top is None or top >= min_confidence


def _run_gains(con: Conn, near: dict[str, list[tuple[str, int]]], by_id: dict[str, tuple], stats: dict,
               kw: Sequence[tuple[str, float]], gain: float, held) -> dict[tuple[str, str], float]:
    """For each best hit and each neighbour it lends to: what the run of messages from the one to
    the other says of the query beyond what either says alone (ranking.run_gains), read from the
    members' index text (the stems of each row version, held by the row cache) with the keyword
    side's own statistics."""
    from memory.store.keywords import B, K1

    idf, avgdl = stats.get("idf"), stats.get("avgdl")
    top = max((b for _, b in kw), default=0.0)
    if not idf or not avgdl or top <= 0 or not near:
        return {}
    ids = sorted(d for d in {*near, *(d for ns in near.values() for d, _ in ns)} if d in by_id)
    stems = held.stems(con, [by_id[d][11] for d in ids])
    counts = {d: stems[by_id[d][11]] for d in ids if by_id[d][11] in stems}
    return ranking.run_gains(near, {d: r[5] for d, r in by_id.items()}, counts, idf, avgdl, K1, B, gain / top)


def _signals(con: Conn, kept: Sequence[tuple[str, float]], qvec, vec: Sequence[tuple[str, float]], vectors: dict,
             kw: Sequence[tuple[str, float]], stats: dict, cache, query: str, texts: dict[str, str]) -> dict[str, Signals]:
    """Each kept hit's absolute signals (memory/recall/calibration.py). Cosines of hits that came
    by keywords or as neighbours are computed from their vectors (at most `limit` of them)."""
    from memory.insight import entities
    from memory.store.vectors import fetch_vectors

    cos = dict(vec)
    if qvec is not None:
        need = [d for d, _ in kept if d not in cos]
        have = {d: vectors[d] for d in need if d in vectors}
        missing = [d for d in need if d not in have]
        if missing:
            have |= cache.vectors(missing)
            have |= fetch_vectors(con, [d for d in missing if d not in have])
        q = np.asarray(qvec, dtype=np.float32)
        cos |= {d: float(np.dot(np.asarray(v, dtype=np.float32), q)) for d, v in have.items()}
    bm25 = dict(kw)
    idf, df = stats.get("idf", {}), stats.get("df", {})
    mass = sum(idf.values()) or 1.0
    # The share of the query's weight some memory holds at all: a question about a hotel this
    # store never heard of names it, and no memory says it.
    known = sum(w for t, w in idf.items() if df.get(t, 0) > 0) / mass
    top = max((c for _, c in vec), default=0.0)
    # How far the best cosine stands above the next candidates': e5 gives any text ~0.75-0.8 with
    # anything (more for a short or foreign-script query), so the cosine alone says little; a
    # memory about the query stands out from the rest of the store.
    rest = sorted((c for _, c in vec), reverse=True)[1:30]
    gap = top - sum(rest) / len(rest) if rest else 0.0
    top_kw = max((b for _, b in kw), default=0.0) / mass
    # The named things of the query (people, places, products) that the hits name: a question
    # about someone memory never mentioned finds other people's messages, never that name.
    # A capitalised sentence opener ("Tell me about...") is not counted: only names said inside a
    # sentence, and Chinese proper nouns.
    names = {e.label.casefold() for e in entities(query) if not _opens_sentence(query, query.find(e.label))}
    said = " ".join(texts.values()).casefold()
    named = sum(n in said for n in names) / len(names) if names else 1.0
    return {d: Signals(cosine=cos.get(d, 0.0), keyword=bm25.get(d, 0.0) / mass, top_cosine=top, rank=i, relative=rel,
                       terms=len(idf), coverage=known if idf else 0.0, top_keyword=top_kw, named=named,
                       names=len(names), gap=gap)
            for i, (d, rel) in enumerate(kept)}


def _opens_sentence(text: str, at: int) -> bool:
    before = text[:max(at, 0)].rstrip(" \t\"'“‘([")
    return at >= 0 and not has_cjk(text[at:at + 1]) and (not before or before[-1] in ".!?\n。！？")


def _neighbours(con: Conn, sessions: dict[str, str | None], spaces: Sequence[str], window: int,
                ids: Callable[[Sequence[int]], dict[int, str]] | None = None,
                held=None) -> tuple[dict[str, list[tuple[str, int]]], list[tuple]]:
    """Each hit's session neighbours within `window` turns on each side, as (id, distance),
    and the rows of those neighbours. `sessions` maps each hit to its session; `ids` names the
    row versions the vector cache holds.

    Two steps: the (seq, session, time, pin) of every active chunk of the sessions, then the
    full rows of the neighbours only (a session of 40 turns had all 40 rows read, ids and texts
    included, for the 2-4 that are used: the largest part of a small space's recall, by
    callgrind), from the row cache `held` when it has them (the first step proved them active)."""
    from memory.store.keywords import rows_by_seq, sql_strings

    wanted = sorted({sid for sid in sessions.values() if sid is not None})
    if not wanted or window <= 0:
        return {}, []
    keys = con.execute(_SESSION_KEYS_SQL.format(sessions=sql_strings(wanted), spaces=sql_strings(spaces))).fetchall()
    seqs = [r[0] for r in keys]
    have = held.held(seqs) if held is not None else {}
    known = {q: r[0] for q, r in have.items()}
    if ids is not None and len(known) < len(seqs):
        known |= ids([q for q in seqs if q not in known])
    missing = [q for q in seqs if q not in known]
    if missing:
        known |= dict(con.execute(f"SELECT seq, id FROM memories WHERE seq IN ({', '.join(map(str, missing))})").fetchall())
    pinned = {q: p for q, _, _, p in keys}
    keys = [(known[q], q, session, at) for q, session, at, _ in keys if q in known]
    near = ranking.session_neighbours(list(sessions), [(d, session, at) for d, _, session, at in keys], window)
    seq_of = {d: q for d, q, _, _ in keys}
    need = sorted({seq_of[d] for ns in near.values() for d, _ in ns})
    if all(q in have for q in need):
        rows = [held.with_pin(have[q], pinned[q]) for q in need]
    else:
        rows = [r for status, r in rows_by_seq(con, need, _ROW_COLUMNS, ids, held).values() if status == "active"]
    # A neighbour rewritten between the two reads has no row here: it is left out.
    got = {r[0] for r in rows}
    near = {hit: kept for hit, ns in near.items() if (kept := [(d, k) for d, k in ns if d in got])}
    return near, rows
