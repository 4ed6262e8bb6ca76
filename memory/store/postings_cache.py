"""The keyword index of the spaces recall searches, held in numpy arrays in this process.

`keywords._index_top` scores a query in SQL: DuckDB reads every posting of the row groups that
hold the query's terms (~250k rows for two terms at 130k memories: ~3 ms, and ~1 ms more for
the term statistics), whatever the space's size. Here the postings of each (space, term) a query
asked for are kept as arrays, so a later query reads only its terms' slices from memory (a few
thousand postings at 10k memories: ~0.2 ms). The scores are the SQL path's (same formula, same
ties at 9 decimals); the rows they name are still checked against `memories` by the caller, as
on the SQL path.

Loaded by term, not by space: a query's missing (space, term) slices and document frequencies
come in one query each (the postings table is sorted by term, so DuckDB reads only those terms'
row groups: a few ms), where loading a whole space's postings took ~175 ms at 10k memories
(200k postings) and made the first search of every space slow.

Keeping it exact: the postings change only when the index is rebuilt (the watermark moves) or
when a forget drops the postings of what it removed (the generation moves); both are meta keys,
read with the watermark on every search. Any change empties the cache; every load reads the
version in the same query (one snapshot), and what was loaded under another version is not kept.
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
# ~40 bytes a posting held: 2M postings (~80 MB) covers the query terms of many spaces.
MAX_POSTINGS = 2_000_000


@dataclass(frozen=True)
class IndexVersion:
    watermark: int
    generation: int


def index_version(con: Conn) -> IndexVersion:
    """The watermark and generation of the postings (one query: recall reads it every search)."""
    got = dict(con.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", [WATERMARK_KEY, GENERATION_KEY]).fetchall())
    return IndexVersion(int(got.get(WATERMARK_KEY, 0)), int(got.get(GENERATION_KEY, 0)))


def index_version_of(meta: dict[str, str] | None) -> IndexVersion | None:
    """The version in meta rows read elsewhere (None: not read, ask `index_version`)."""
    if meta is None:
        return None
    return IndexVersion(int(meta.get(WATERMARK_KEY, 0)), int(meta.get(GENERATION_KEY, 0)))


def bump_generation(con: Conn) -> None:
    """Mark the postings changed (inside the transaction that changes them)."""
    con.execute("INSERT INTO meta VALUES (?, (SELECT coalesce(max(value::BIGINT), 0) + 1 FROM meta WHERE key = ?)::VARCHAR) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value", [GENERATION_KEY, GENERATION_KEY])


@dataclass(frozen=True)
class _Slice:
    """The postings of one term in one space."""

    doc: np.ndarray                        # int64 memory seq
    tf: np.ndarray                         # float64 (the formula's arithmetic is in doubles)
    length: np.ndarray                     # float64
    kind: np.ndarray                       # object: the memory kind of each posting

    @property
    def size(self) -> int:
        return len(self.doc) + 1           # an empty slice still takes an entry


_EMPTY = _Slice(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0, dtype=object))

# Reads the version in the same statement as the rows, so both come from one snapshot.
_VERSIONED = f"""
    WITH v AS (SELECT max(CASE WHEN key = '{WATERMARK_KEY}' THEN value END) AS wm,
                      max(CASE WHEN key = '{GENERATION_KEY}' THEN value END) AS gen
               FROM meta WHERE key IN ('{WATERMARK_KEY}', '{GENERATION_KEY}'))
    SELECT v.wm, v.gen, r.* FROM v LEFT JOIN ({{rows}}) r ON true
"""


class PostingsCache:
    """The postings and document frequencies that queries asked for, for one index version."""

    def __init__(self, max_postings: int = MAX_POSTINGS) -> None:
        self.max_postings = max_postings
        self._lock = threading.Lock()
        self._version: IndexVersion | None = None
        self._df: dict[str, int] = {}
        self._n = self._total_len = 0
        self._slices: OrderedDict[tuple[str, str], _Slice] = OrderedDict()  # LRU order
        self._held = 0                     # postings in _slices

    def stats(self, con: Conn, version: IndexVersion, stems: Sequence[str]) -> tuple[int, int, dict[str, int]] | None:
        """(N, total length, df of each stem) of the index, or None when the index changed
        under the load (the caller then asks SQL)."""
        with self._lock:
            if self._version != version:
                self._reset()
            fresh = self._version is None
            missing = [t for t in stems if t not in self._df]
            if fresh or missing:
                terms = _sql_strings(missing) or "NULL"
                got = con.execute(_VERSIONED.format(rows=f"""
                    SELECT NULL AS term, NULL::BIGINT AS df, n, total_len FROM {STATS} WHERE {fresh}
                    UNION ALL SELECT term, df, NULL, NULL FROM {DICT} WHERE term IN ({terms})""")).fetchall()
                if not got or _version_of(got[0]) != version:
                    return None
                for _, _, term, df, n, total in got:
                    if term is not None:
                        self._df[term] = int(df)
                    elif n is not None:
                        self._n, self._total_len = int(n), int(total)
                self._df.update((t, 0) for t in missing if t not in self._df)
                self._version = version
            return self._n, self._total_len, {t: self._df.get(t, 0) for t in stems}

    def top(self, con: Conn, version: IndexVersion, stems: Sequence[str], idf: dict[str, float], avgdl: float,
            space_ids: Sequence[str], kinds: Sequence[str] | None, over: int, k1: float, b: float) -> list[tuple[int, float]] | None:
        """The index's best `over` (seq, score) of the allowed spaces and every row tied with the
        last of them at 9 decimals, best first; None when the index changed under the load."""
        slices = self._slices_of(con, version, list(dict.fromkeys(space_ids)), stems)
        if slices is None:
            return None
        docs, scores = [], []
        for space_slices in slices:
            sel = [(t, sl) for t, sl in space_slices if len(sl.doc)]
            if not sel:
                continue
            doc = np.concatenate([sl.doc for _, sl in sel])
            tf = np.concatenate([sl.tf for _, sl in sel])
            ln = np.concatenate([sl.length for _, sl in sel])
            weight = np.concatenate([np.full(len(sl.doc), idf[t]) for t, sl in sel])
            if kinds:
                keep = np.isin(np.concatenate([sl.kind for _, sl in sel]), list(kinds))
                doc, tf, ln, weight = doc[keep], tf[keep], ln[keep], weight[keep]
            part = weight * tf * (k1 + 1) / (tf + k1 * ((1 - b) + b * ln / avgdl))
            uniq, inv = np.unique(doc, return_inverse=True)
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
        self._slices.clear()
        self._held = 0

    def _slices_of(self, con: Conn, version: IndexVersion, spaces: list[str],
                   stems: Sequence[str]) -> list[list[tuple[str, _Slice]]] | None:
        """Per space, each stem's slice (loading the missing ones in one query)."""
        with self._lock:
            if self._version != version:
                return None
            have = {k: self._slices.get(k) for k in ((s, t) for s in spaces for t in stems)}
            for k, sl in have.items():
                if sl is not None:
                    self._slices.move_to_end(k)
        missing = [k for k, sl in have.items() if sl is None]
        if missing:
            got = con.execute(_VERSIONED.format(rows=f"""
                SELECT space_id, term, doc, tf, len, kind FROM {POSTINGS}
                WHERE term IN ({_sql_strings(sorted({t for _, t in missing}))})
                  AND space_id IN ({_sql_strings(sorted({s for s, _ in missing}))})
                ORDER BY space_id, term, doc""")).fetchnumpy()
            if not len(got["wm"]) or _version_of((got["wm"][0], got["gen"][0])) != version:
                return None
            loaded = dict.fromkeys(missing, _EMPTY)
            rows = np.flatnonzero(~_nulls(got["doc"]))
            if len(rows):
                space, term = got["space_id"][rows], got["term"][rows]
                cuts = np.flatnonzero((space[1:] != space[:-1]) | (term[1:] != term[:-1])) + 1
                for a, e in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)]):
                    key, sel = (space[a], term[a]), rows[a:e]
                    if key in loaded:
                        loaded[key] = _Slice(np.asarray(got["doc"][sel], dtype=np.int64),
                                             np.asarray(got["tf"][sel], dtype=np.float64),
                                             np.asarray(got["len"][sel], dtype=np.float64),
                                             np.asarray(got["kind"][sel], dtype=object))
            with self._lock:
                if self._version != version:
                    return None
                for k, sl in loaded.items():
                    if k not in self._slices:
                        self._slices[k] = sl
                        self._held += sl.size
                    have[k] = sl
                while self._held > self.max_postings and len(self._slices) > len(loaded):
                    _, old = self._slices.popitem(last=False)
                    self._held -= old.size
        return [[(t, have[(s, t)]) for t in stems] for s in spaces]


def _version_of(row: Sequence) -> IndexVersion:
    wm, gen = row[0], row[1]
    masked = np.ma.is_masked
    return IndexVersion(int(wm) if wm is not None and not masked(wm) else 0,
                        int(gen) if gen is not None and not masked(gen) else 0)


def _nulls(col: np.ndarray) -> np.ndarray:
    """Which values are NULL (DuckDB masks them; the PostgreSQL connection gives None)."""
    mask = np.ma.getmaskarray(col)
    if col.dtype == object:
        mask = mask | np.fromiter((v is None for v in np.asarray(col)), dtype=bool, count=len(col))
    return mask


def _sql_strings(values: Sequence[str]) -> str:
    """Values as SQL string literals, quotes doubled (a constant IN list prunes by zone maps)."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


# The postings cache of a store (one per Store object, made on first use).
postings_for: PerStore[PostingsCache] = PerStore(lambda store: PostingsCache())
