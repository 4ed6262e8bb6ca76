"""What a recalled memory's signals say on an absolute scale: the chance that it is about the
query. Recall's ranked scores are relative (the top hit is always 1.0), so they cannot tell a
store that holds the answer from one that holds nothing about it; these signals can.

The signals of a hit (all known at the end of a search, no extra query):
- cosine: the query vector's cosine with the memory's (e5 cosines sit in ~0.7-0.95);
- keyword: its BM25 over the query's idf mass (the sum of its terms' idf, a term no memory holds
  counting fully): about the share of what the query names that the memory says;
- top_cosine: the best cosine the query found in the searched spaces;
- rank: its place in the ranking, from 0; relative: its ranked score over the top's;
- terms: how many terms the query has (a long query has lower cosines and a smaller share);
- coverage: the share of the query's idf mass that some memory of the searched spaces holds at
  all (a question about a hotel this store never heard of names it, and nothing says it);
- gap: the best cosine minus the mean of the next vector candidates' (up to 29): e5 gives any
  text ~0.75-0.8 with anything, more for a short or foreign-script query, so a cosine means
  little alone; a memory about the query stands out from the rest of the store;
- named, names: the share of the query's named things (memory/insight.py: capitalised names,
  jieba's proper nouns) that the hits name, and how many it names.

confidence = sigmoid(b + sum_i w_i * x_i) over `features(s)` of a query's best hit, with weights
learned by bench/calibrate_recall.py on the dev sets (a store's own question: 1 when its block
shows evidence, else 0; another conversation's question: 0), fitted on some conversations and
checked on the others. Recall abstains per query, never per hit (search.confident).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Signals:
    """What recall knew of one hit (see the module docstring)."""

    cosine: float
    keyword: float
    top_cosine: float
    rank: int
    relative: float
    terms: int
    coverage: float = 1.0
    top_keyword: float = 0.0
    named: float = 1.0
    names: int = 0
    gap: float = 0.0


FEATURE_NAMES = ("cosine", "keyword", "top_cosine", "top_keyword", "coverage", "log_terms", "unnamed", "gap")


def features(s: Signals) -> tuple[float, ...]:
    # unnamed: the share of the query's named things no hit names (0 when it names none).
    return (s.cosine, min(s.keyword, 2.0), s.top_cosine, min(s.top_keyword, 2.0), s.coverage, math.log1p(s.terms),
            (1.0 - s.named) if s.names else 0.0, 10 * s.gap)  # x 10: on the others' scale for the fit's penalty


# Learned by bench/calibrate_recall.py (see bench/RESULTS-recall.md) for this embedder's cosines;
# another model's cosines sit elsewhere, so recall with it is not calibrated (never abstains).
CALIBRATED_FOR = "local:multilingual-e5-small"
INTERCEPT: float | None = -5.4227
WEIGHTS: tuple[float, ...] = (0.9459, 0.8944, 0.3747, 0.6734, 1.1578, 0.7823, -0.8906, 3.6389)
# The threshold the same script chose: the highest whose left-out R@block loses <= 1 point per set
# (noise LoCoMo 100 -> 34.5%, CrossWOZ 84.6%, MADial 98.8 / 96.9%). Not the default: an association
# that shares no word with its memory ("推荐一个零食" for "我对花生过敏", tests/bot/turn/test_agent_e2e.py)
# scores under it in a small store, and that recall matters more than the noise it saves.
LEARNED_THRESHOLD = 0.13
MIN_CONFIDENCE = 0.0


def calibrated(embedder_name: str) -> bool:
    """True when the learned weights are for this embedder's cosines."""
    return INTERCEPT is not None and bool(WEIGHTS) and embedder_name == CALIBRATED_FOR


def confidence(s: Signals, intercept: float | None = None, weights: tuple[float, ...] | None = None) -> float | None:
    """P(the memory is about the query), or None when there are no learned weights."""
    b = INTERCEPT if intercept is None else intercept
    w = WEIGHTS if weights is None else weights
    if b is None or not w:
        return None
    z = b + sum(wi * xi for wi, xi in zip(w, features(s)))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))
