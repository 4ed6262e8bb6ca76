"""The rows keyword search scores directly: the active memory versions written since the postings
were built (memory/store/keywords.py), tokenised, with their own small inverted index, kept in
this process and brought up to date on every search.

Every search needs the fresh rows' count, total length and each query stem's document frequency
(BM25's N, avgdl and df count them with the indexed rows), and the fresh rows that hold a query
stem. Read whole on every search, they cost O(fresh rows) in Python: with 30 busy chats the
fresh rows of 15 minutes (~10k) took ~160 ms of CPU per reply across recall, skill search and
ingest's fact lookups, more than everything else the gateway did. Here a search reads only the
seqs of the active fresh rows (one int array, no Python object per row), compares them with
what is held, tokenises only the versions it has not seen, and then touches only the rows of
its own stems.

Exact: the held state is made equal to the listing this search's connection read (rows come,
and go when retired, forgotten or rewritten, under their new seq), and the search is scored
from it under the same lock, so two threads reading different snapshots each get their own.
A seq names one version of a row, whose text never changes, so its tokens never go stale. A
new watermark (the index was rebuilt) starts over.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from memory.store.connection import Conn
from memory.store.dialect import dialect_of
from memory.store.tokens import STEM_SQL, TOKENS_SQL, stems_of


@dataclass(frozen=True, slots=True)
class FreshRow:
    id: str
    space: str
    kind: str
    counts: Counter
    length: int


_EMPTY = FreshRow("", "", "", Counter(), 0)


class FreshRows:
    """The fresh rows of one store (held beside its postings cache)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wm: int | None = None
        self._seqs = np.empty(0, dtype=np.int64)      # the active fresh seqs last listed, ascending
        self._rows: dict[int, FreshRow] = {}          # of those seqs
        self._by_stem: dict[str, set[int]] = {}       # stem -> seqs of rows holding it
        self.n = 0             # rows with at least one token (as the index counts them)
        self.total_len = 0     # their tokens

    @contextmanager
    def synced(self, con: Conn, wm: int) -> Iterator[FreshRows]:
        """This object as `con` sees the table now (locked until the block ends)."""
        seqs = active_fresh_seqs(con, wm)
        with self._lock:
            self._sync(con, wm, seqs)
            yield self

    def df(self, stem: str) -> int:
        got = self._by_stem.get(stem)
        return len(got) if got else 0

    def having(self, stems: Sequence[str]) -> Iterator[tuple[int, FreshRow]]:
        """(seq, row) of the rows holding any of `stems`, each once."""
        seqs: set[int] = set()
        for s in stems:
            seqs |= self._by_stem.get(s, set())
        for seq in seqs:
            yield seq, self._rows[seq]

    def _sync(self, con: Conn, wm: int, seqs: np.ndarray) -> None:
        if wm != self._wm:
            self._wm, self._seqs, self._rows, self._by_stem = wm, np.empty(0, dtype=np.int64), {}, {}
            self.n = self.total_len = 0
        if len(seqs) == len(self._seqs) and np.array_equal(seqs, self._seqs):
            return
        for seq in np.setdiff1d(self._seqs, seqs, assume_unique=True).tolist():
            self._drop(seq)
        added = np.setdiff1d(seqs, self._seqs, assume_unique=True).tolist()
        got = tokenised(con, added)
        for seq in added:
            # Without a token (or gone since the listing) it counts for nothing, as in the index;
            # held all the same, so the next listing finds nothing new.
            self._add(seq, got.get(seq, _EMPTY))
        self._seqs = seqs

    def _add(self, seq: int, row: FreshRow) -> None:
        self._rows[seq] = row
        if row.length:
            self.n += 1
            self.total_len += row.length
            for stem in row.counts:
                self._by_stem.setdefault(stem, set()).add(seq)

    def _drop(self, seq: int) -> None:
        row = self._rows.pop(seq, None)
        if row is None or not row.length:
            return
        self.n -= 1
        self.total_len -= row.length
        for stem in row.counts:
            holders = self._by_stem.get(stem)
            if holders is not None:
                holders.discard(seq)
                if not holders:
                    del self._by_stem[stem]


def active_fresh_seqs(con: Conn, wm: int) -> np.ndarray:
    """The seqs of the active rows written since the build, ascending (an int array: a Python
    object per row is what this module saves)."""
    got = con.execute(f"SELECT seq FROM memories WHERE seq > {int(wm)} AND status = 'active' ORDER BY seq").fetchnumpy()
    return np.asarray(got["seq"], dtype=np.int64)


def tokenised(con: Conn, seqs: Sequence[int]) -> dict[int, FreshRow]:
    """seq -> its row version's id, space, kind and stem counts (as the index tokenises it)."""
    if not seqs:
        return {}
    in_list = ", ".join(str(int(x)) for x in seqs)
    if dialect_of(con).postgres:
        rows = con.execute(f"SELECT id, seq, space_id, kind, search_text FROM memories WHERE seq IN ({in_list})").fetchall()
        found = [(*r[:4], toks) for r, toks in zip(rows, stems_of([r[4] for r in rows]))]
    else:
        found = con.execute(f"""
            SELECT id, seq, space_id, kind, list({STEM_SQL.format(tok='tok')}) FILTER (WHERE tok <> '')
            FROM (SELECT id, seq, space_id, kind, {TOKENS_SQL} AS tok FROM memories WHERE seq IN ({in_list}))
            GROUP BY id, seq, space_id, kind""").fetchall()
    out = {}
    for doc, seq, space, kind, toks in found:
        counts = Counter(toks or ())
        out[int(seq)] = FreshRow(doc, space, kind, counts, sum(counts.values()))
    return out
