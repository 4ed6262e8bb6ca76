"""Pure scoring functions of recall, each with its formula. No I/O here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np


def rrf(rankings: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None) -> dict[str, float]:
    """Reciprocal rank fusion: score(d) = sum_i w_i / (k + rank_i(d)), ranks from 1."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return scores


def min_max(scored: Sequence[tuple[str, float]], min_span: float = 0.0) -> dict[str, float]:
    """Scale scores to [0, 1] within one candidate list: 1 - (max - s) / span, with
    span = max(max - min, min_span). The minimum span keeps a short list from turning a tiny
    difference (two cosines 0.01 apart) into the whole range."""
    if not scored:
        return {}
    hi = max(s for _, s in scored)
    span = max(hi - min(s for _, s in scored), min_span)
    if span <= 0:
        return {d: 1.0 for d, _ in scored}
    return {d: 1.0 - (hi - s) / span for d, s in scored}


def convex_fusion(vector: Sequence[tuple[str, float]], keyword: Sequence[tuple[str, float]],
                  keyword_weight: float = 0.5, vector_span: float = 0.1, keyword_span: float = 0.5) -> dict[str, float]:
    """Convex combination of min-max-normalised scores: (1 - w) * vec(d) + w * kw(d).

    Unlike RRF it keeps how far apart the candidates are, not just their order: on LoCoMo
    it finds 73.8% of the evidence in the top 10 where RRF (k=60) finds 67.4%, with the same
    candidates (see bench/recall_locomo.py and the closing note of issue 2). Spans: cosine
    differences under 0.1 and BM25 differences under half the top score are not stretched.
    """
    top_kw = max((s for _, s in keyword), default=0.0)
    v, k = min_max(vector, vector_span), min_max(keyword, keyword_span * top_kw)
    # In the lists' order (vector, then keyword-only), not a set's (it changes with the hash seed)
    # nor the ids' (random): equal scores keep the order their lists gave them, which is by row
    # version for keyword ties, so a run on the same conversation ranks the same.
    order = dict.fromkeys([d for d, _ in vector] + [d for d, _ in keyword])
    return {d: (1 - keyword_weight) * v.get(d, 0.0) + keyword_weight * k.get(d, 0.0) for d in order}


def time_decay(age_days: float, half_life_days: float = 14.0, floor: float = 0.3) -> float:
    """Recency factor: floor + (1 - floor) * 0.5 ** (age_days / half_life); 1 for age <= 0."""
    if half_life_days <= 0:
        return 1.0
    return floor + (1.0 - floor) * 0.5 ** (max(age_days, 0.0) / half_life_days)


def age_days(created_at: datetime, now: datetime) -> float:
    return (now - created_at).total_seconds() / 86400.0


def mmr(scores: Mapping[str, float], vectors: Mapping[str, np.ndarray], limit: int, lam: float = 0.7) -> list[str]:
    """Maximal marginal relevance: repeatedly pick argmax lam * rel(d) - (1 - lam) * max_sim(d, picked).

    `rel` is the score scaled to [0, 1] so it is comparable with cosine similarity. Items
    without a vector are treated as dissimilar to everything.
    """
    if not scores:
        return []
    docs = sorted(scores, key=lambda d: -scores[d])
    top = scores[docs[0]] or 1.0
    rel = np.array([scores[d] / top for d in docs], dtype=np.float64)
    dim = next((len(v) for v in vectors.values()), 0)
    mat = np.array([vectors[d] if d in vectors else np.zeros(dim) for d in docs], dtype=np.float32).reshape(len(docs), dim)
    sims = mat @ mat.T if dim else np.zeros((len(docs), len(docs)))
    max_sim = np.zeros(len(docs))
    free = np.ones(len(docs), dtype=bool)
    picked: list[int] = []
    for _ in range(min(limit, len(docs))):
        val = np.where(free, lam * rel - (1.0 - lam) * max_sim, -np.inf)
        i = int(np.argmax(val))
        picked.append(i)
        free[i] = False
        max_sim = np.maximum(max_sim, sims[i])
    return [docs[i] for i in picked]


def cut_and_normalise(ranked: Sequence[tuple[str, float]], cutoff: float = 0.3) -> list[tuple[str, float]]:
    """Drop items scoring below cutoff * top score, then scale so the top is 1.0 (scores in [0, 1])."""
    if not ranked:
        return []
    top = max(s for _, s in ranked)
    if top <= 0:
        return []
    return [(d, s / top) for d, s in ranked if s >= cutoff * top]


def word_overlap(a: str, b: str) -> float:
    """|words(a) & words(b)| / min(|words(a)|, |words(b)|): 1.0 when one text contains the other."""
    wa, wb = set(a.lower().split()), set(b.lower().split())
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / min(len(wa), len(wb))


def speaker_boost(scores: Mapping[str, float], speakers: Mapping[str, str | None], query: str,
                  boost: float = 0.15) -> dict[str, float]:
    """Multiply by (1 + boost) the memories said by someone the query names.

    "What did Caroline say about the adoption agency?" is about Caroline's own words; in a group
    chat (or a LoCoMo dialogue) that is the strongest cue the query gives. Names are matched as
    whole words, case-insensitively.
    """
    words = set(re.findall(r"[^\W_]+", query.lower()))
    out = dict(scores)
    for doc, who in speakers.items():
        if who and doc in out and who.lower() in words:
            out[doc] *= 1.0 + boost
    return out


def session_neighbours(hits: Sequence[str], rows: Sequence[tuple[str, str, datetime]],
                       window: int) -> dict[str, list[tuple[str, int]]]:
    """The `window` chunks said just before and just after each hit in its session, as
    (id, distance), nearest first on each side; `rows` are (id, session, created_at) of every
    chunk of the hits' sessions. A chunk said at the same moment as the hit counts as after it;
    equal times are ordered by id."""
    by_session: dict[str, list[tuple[datetime, str]]] = {}
    where: dict[str, tuple[str, datetime]] = {}
    for doc, session, at in rows:
        by_session.setdefault(session, []).append((at, doc))
        where[doc] = (session, at)
    out: dict[str, list[tuple[str, int]]] = {}
    for hit in hits:
        if hit not in where or window <= 0:
            continue
        session, at = where[hit]
        others = [(t, d) for t, d in by_session[session] if d != hit]
        before = sorted((x for x in others if x[0] < at), key=lambda x: (at - x[0], x[1]))[:window]
        after = sorted((x for x in others if x[0] >= at), key=lambda x: (x[0] - at, x[1]))[:window]
        near = [(d, i) for i, (_, d) in enumerate(before, 1)] + [(d, i) for i, (_, d) in enumerate(after, 1)]
        if near:
            out[hit] = sorted(near, key=lambda x: x[1])
    return out


def expand_to_neighbours(scores: Mapping[str, float], neighbours: Mapping[str, Sequence[tuple[str, int]]], top: int = 5,
                         weight: float = 0.6, decay: float = 1.0, add: float = 0.0,
                         gains: Mapping[tuple[str, str], float] | None = None) -> dict[str, float]:
    """Second step from the first results: each of the `top` best memories lends
    lend(n) = weight * decay ** (distance - 1) * score(d) to the memories said `distance` turns
    before or after it in its session, and a neighbour keeps the best it is lent, plus `add` x
    the smaller of the two:
        score(n) = max(score(n), lend(n)) + add * min(score(n), lend(n)),  lend(n) = max_d lend_d(n)
    add = 0 keeps the larger, add = 1 sums them (a neighbour relevant itself beats one that is
    only near a good hit).

    The answer to "what did I ask for when you recommended X?" sits in the turn before the one
    naming X; "what is its phone number?" is answered by the turn after the question naming it.

    `gains[(d, n)]`: what the run of messages from d to n says of the query beyond either alone
    (`run_gains`); the run is one unit, scored score(d) + gain: d lends weight x decay x that,
    and d itself keeps the best of its runs (score(d) + max gain). Without gains, the step above.
    """
    gains = gains or {}
    lent: dict[str, float] = {}
    raised: dict[str, float] = {}
    for doc in sorted(scores, key=lambda d: -scores[d])[:top]:
        for n, dist in neighbours.get(doc, ()):
            g = gains.get((doc, n), 0.0)
            value = weight * decay ** max(dist - 1, 0) * (scores[doc] + g)
            lent[n] = max(lent.get(n, 0.0), value)
            if g > 0:
                raised[doc] = max(raised.get(doc, 0.0), g)
    out = dict(scores)
    for doc, g in raised.items():
        out[doc] = scores[doc] + g
    for n, value in lent.items():
        own = out.get(n, 0.0)
        out[n] = max(own, value) + add * min(own, value)
    return out


def content_mmr(scores: Mapping[str, float], tokens: Mapping[str, frozenset[str]], limit: int, lam: float = 0.7,
                ignore: frozenset[str] = frozenset()) -> list[str]:
    """MMR for a count or list query, with the similarity of two memories = the Jaccard overlap
    of their words outside the query (`ignore`):
        pick argmax lam * rel(d) - (1 - lam) * max_{p picked} J(words(d) - q, words(p) - q).

    "Which events were in Shanghai?" wants every "I went to X in Shanghai": their vectors are
    close (same frame, same city), but what they are about (X) differs. Two memories about the
    same X overlap and the second is pushed down.
    """
    if not scores:
        return []
    docs = sorted(scores, key=lambda d: -scores[d])
    top = scores[docs[0]] or 1.0
    words = {d: tokens.get(d, frozenset()) - ignore for d in docs}
    picked: list[str] = []
    free = list(docs)
    max_sim = dict.fromkeys(docs, 0.0)
    while free and len(picked) < limit:
        best = max(free, key=lambda d: lam * scores[d] / top - (1.0 - lam) * max_sim[d])
        picked.append(best)
        free.remove(best)
        wb = words[best]
        for d in free:
            wd = words[d]
            if wb and wd:
                max_sim[d] = max(max_sim[d], len(wb & wd) / len(wb | wd))
    return picked


def session_evidence(scores: Mapping[str, float], session_of: Mapping[str, str | None], weight: float) -> dict[str, float]:
    """Pull each chunk towards the best score in its session:
        score(d) = (1 - weight) * score(d) + weight * max_{e in session(d)} score(e)
    A fact told over several short messages has its session found by one of them; the others
    rise with it. Memories without a session keep their score."""
    best: dict[str, float] = {}
    for d, sc in scores.items():
        sess = session_of.get(d)
        if sess is not None:
            best[sess] = max(best.get(sess, sc), sc)
    return {d: (1 - weight) * sc + weight * best[sess] if (sess := session_of.get(d)) is not None else sc
            for d, sc in scores.items()}


def bm25_of(counts: Mapping[str, int], length: int, idf: Mapping[str, float], avgdl: float, k1: float, b: float) -> float:
    """BM25 of one bag of stems: sum_t idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))."""
    return sum(w * counts[t] * (k1 + 1) / (counts[t] + k1 * (1 - b + b * length / avgdl)) for t, w in idf.items() if counts.get(t))


def run_gains(neighbours: Mapping[str, Sequence[tuple[str, int]]], at: Mapping[str, datetime],
              counts: Mapping[str, Mapping[str, int]], idf: Mapping[str, float], avgdl: float, k1: float, b: float,
              scale: float) -> dict[tuple[str, str], float]:
    """For each hit d and neighbour n: the run from d to n (d, n and the neighbours of d between
    them, on n's side) as one unit, and what it says of the query beyond its best message m*:
        gain(d, n) = scale * sum_{t not in m*} max_{m in run} bm25_t(m)
    (bm25_t(m): query word t's part of m's BM25). A run that only repeats what one message says
    gains 0; one that joins a name to the attribute said after it ("北京饭店" ... "地址是东城区...")
    gains the attribute's words."""
    def parts(c: Mapping[str, int]) -> dict[str, float]:
        length = sum(c.values())
        return {t: bm25_of({t: c[t]}, length, {t: w}, avgdl, k1, b) for t, w in idf.items() if c.get(t)}

    out: dict[tuple[str, str], float] = {}
    for d, ns in neighbours.items():
        if d not in counts or d not in at:
            continue
        part = {m: parts(counts[m]) for m in [d, *(x for x, _ in ns)] if m in counts}
        for n, dist in ns:
            if n not in counts or n not in at:
                continue
            after = at[n] >= at[d]
            members = [d] + [m for m, k in ns if k <= dist and m in part and m in at and (at[m] >= at[d]) == after]
            best = max(members, key=lambda m: sum(part[m].values()))
            extra: dict[str, float] = {}
            for m in members:
                for t, v in part[m].items():
                    if t not in part[best]:
                        extra[t] = max(extra.get(t, 0.0), v)
            if extra:
                out[(d, n)] = scale * sum(extra.values())
    return out
