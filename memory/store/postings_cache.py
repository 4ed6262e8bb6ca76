"""The keyword index of the spaces recall searches, held in numpy arrays in this process.

`keywords._index_top` scores a query in SQL: DuckDB reads every posting of the row groups that
hold the query's terms (~250k rows for two terms at 130k memories: ~3 ms, and ~1 ms more for
the term statistics), whatever the space's size. Here a space's postings are arrays sorted by
term, so a query reads only its terms' slices of its spaces (a few thousand postings at 10k
memories: ~0.2 ms). The scores are the SQL path's (same formula, same ties at 9 decimals);
the rows they name are still checked against `memories` by the caller, as on the SQL path.

Keeping it exact: the postings change only when the index is rebuilt (the watermark moves) or
when a forget drops the postings of what it removed (the generation moves); both are meta keys,
read with the watermark on every search. Any change empties the cache; a space loaded while
the index changed underneath is not kept.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memory.store.connection import Conn, PerStore

log = logging.getLogger(__name__)

POSTINGS, DICT, STATS = "fts_postings", "fts_dict", "fts_stats"
WATERMARK_KEY = "fts_postings_seq"
GENERATION_KEY = "fts_postings_generation"
# ~17 bytes a posting: 8M postings (~130 MB) is ~400k memories of chat text.
MAX_POSTINGS = 8_000_000


@dataclass(frozen=True)
class IndexVersion:
    watermark: int
    generation: int


def index_version(con: Conn) -> IndexVersion:
    """The watermark and generation of the postings (one query: recall reads it every search)."""
    got = dict(con.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", [WATERMARK_KEY, GENERATION_KEY]).fetchall())
    return IndexVersion(int(got.get(WATERMARK_KEY, 0)), int(got.get(GENERATION_KEY, 0)))


def bump_generation(con: Conn) -> None:
    """Mark the postings changed (inside the transaction that changes them)."""
    con.execute("INSERT INTO meta VALUES (?, (SELECT coalesce(max(value::BIGINT), 0) + 1 FROM meta WHERE key = ?)::VARCHAR) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value", [GENERATION_KEY, GENERATION_KEY])


@dataclass
class _SpacePostings:
    slices: dict[str, tuple[int, int]]     # term -> [start, end) in the arrays
    doc: np.ndarray                        # int64 memory seq
    tf: np.ndarray                         # float64 (the formula's arithmetic is in doubles)
    length: np.ndarray                     # float64
    kind: np.ndarray                       # object: the memory kind of each posting

    @property
    def size(self) -> int:
        return len(self.doc)


class PostingsCache:
    """The postings of the searched spaces, plus the term statistics, for one index version."""

    def __init__(self, max_postings: int = MAX_POSTINGS) -> None:
        self.max_postings = max_postings
        self._lock = threading.Lock()
        self._version: IndexVersion | None = None
        self._df: dict[str, int] = {}
        self._n = self._total_len = 0
        self._spaces: OrderedDict[str, _SpacePostings] = OrderedDict()
        self._too_big: set[str] = set()

    def stats(self, con: Conn, version: IndexVersion, stems: Sequence[str]) -> tuple[int, int, dict[str, int]] | None:
        """(N, total length, df of each stem) of the index, or None when the index changed while
        loading (the caller then asks SQL)."""
        with self._lock:
            if self._version != version:
                self._reset()
                n, total = con.execute(f"SELECT n, total_len FROM {STATS}").fetchone()
                got = con.execute(f"SELECT term, df FROM {DICT}").fetchnumpy()
                df = dict(zip(got["term"].tolist(), got["df"].tolist()))
                if index_version(con) != version:
                    return None
                self._version, self._n, self._total_len, self._df = version, int(n), int(total), df
            return self._n, self._total_len, {t: self._df.get(t, 0) for t in stems}

    def top(self, con: Conn, version: IndexVersion, stems: Sequence[str], idf: dict[str, float], avgdl: float,
            space_ids: Sequence[str], kinds: Sequence[str] | None, over: int, k1: float, b: float) -> list[tuple[int, float]] | None:
        """The index's best `over` (seq, score) of the allowed spaces and every row tied with the
        last of them at 9 decimals, best first; None when a space cannot be held (SQL then)."""
        parts = []
        for space in dict.fromkeys(space_ids):
            sp = self._space(con, version, space)
            if sp is None:
                return None
            parts.append(sp)
        docs, scores = [], []
        for sp in parts:
            sel = [(t, *sp.slices[t]) for t in stems if t in sp.slices]
            if not sel:
                continue
            idx = np.concatenate([np.arange(a, e) for _, a, e in sel])
            weight = np.concatenate([np.full(e - a, idf[t]) for t, a, e in sel])
            if kinds:
                keep = np.isin(sp.kind[idx], list(kinds))
                idx, weight = idx[keep], weight[keep]
            tf, ln = sp.tf[idx], sp.length[idx]
            part = weight * tf * (k1 + 1) / (tf + k1 * ((1 - b) + b * ln / avgdl))
            uniq, inv = np.unique(sp.doc[idx], return_inverse=True)
            docs.append(uniq)
            scores.append(np.bincount(inv, weights=part, minlength=len(uniq)))
        if not docs:
            return []
        doc, score = np.concatenate(docs), np.concatenate(scores)
        rounded = np.round(score, 9)
        if len(doc) > over:
            cut = np.partition(rounded, len(rounded) - over)[len(rounded) - over]
            keep = rounded >= cut
            doc, score, rounded = doc[keep], score[keep], rounded[keep]
        order = np.lexsort((doc, -rounded))
        return [(int(doc[i]), float(score[i])) for i in order]

    def clear(self) -> None:
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        self._version = None
        self._df = {}
        self._spaces.clear()
        self._too_big.clear()

    def _space(self, con: Conn, version: IndexVersion, space: str) -> _SpacePostings | None:
        with self._lock:
            if self._version != version:
                return None
            sp = self._spaces.get(space)
            if sp is not None:
                self._spaces.move_to_end(space)
                return sp
            if space in self._too_big:
                return None
        # Loaded outside the lock (a big space takes a moment); kept only if the index did not move.
        got = con.execute(f"SELECT term, doc, tf, len, kind FROM {POSTINGS} WHERE space_id = ? ORDER BY term, doc",
                          [space]).fetchnumpy()
        terms = got["term"]
        n = len(terms)
        if n > self.max_postings:
            with self._lock:
                self._too_big.add(space)
            log.info("space %s has %d postings, more than the keyword cache holds: scored in SQL", space, n)
            return None
        starts = [0, *(np.flatnonzero(terms[1:] != terms[:-1]) + 1).tolist()] if n else []
        ends = [*starts[1:], n]
        sp = _SpacePostings(slices={terms[a]: (a, e) for a, e in zip(starts, ends)},
                            doc=np.asarray(got["doc"], dtype=np.int64), tf=np.asarray(got["tf"], dtype=np.float64),
                            length=np.asarray(got["len"], dtype=np.float64), kind=np.asarray(got["kind"], dtype=object))
        if index_version(con) != version:
            return None
        with self._lock:
            if self._version != version:
                return None
            while self._spaces and sum(s.size for s in self._spaces.values()) + sp.size > self.max_postings:
                self._spaces.popitem(last=False)
            self._spaces[space] = sp
        return sp


# The postings cache of a store (one per Store object, made on first use).
postings_for: PerStore[PostingsCache] = PerStore(lambda store: PostingsCache())
