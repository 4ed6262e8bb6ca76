"""Recall's rows by version, held in this process (issue 33: recall at the floor).

A memory version is its `seq`, and what recall reads of a row never changes within a version:
its id, space, kind, title, text, time, role, speaker, category, session and index text are
written once, and every text change (an edit, a forget, retention) gives the row a new seq
(rows.bump_seq). What can change without a new seq is the status (retired, archived, deleted)
and the pin. So a search asks SQL only for those two of the rows it looks up, by seq, and takes
the rest from here.

Why: DuckDB stores the strings FSST-compressed in segments, and reading one row's strings
decodes from its segment's start (~35 us a row for the id alone, by callgrind); a search looks
up 60-100 rows, and their strings were most of its time in SQL. The stems of a row's index
text (recall's runs of messages score them with BM25) are kept here too, so they are read and
stemmed once, not at every search.

Safe by construction: an entry is used only for a seq the table still has (the status lookup
says so), and the seq names exactly the version the entry was read from; one person's rows
never answer for another's (the space filter is applied to what SQL says exists). Entries of
erased or compacted spaces are dropped at once (`drop_spaces`, called where the vector files
are rewritten), so forgotten text does not stay in this process until it ages out.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence

from memory.store.connection import Conn, PerStore

# The columns recall reads of a row, in the order it reads them (memory/recall/search.py).
RECALL_COLUMNS = "id, kind, space_id, title, text, created_at, pinned, role, speaker, category, session_id, seq"
_PINNED = 6          # the one column above that changes without a new seq
_SPACE = 2
# ~1 KB a row held: 30k rows ~30 MB, the rows a busy process's searches keep coming back to.
MAX_ROWS = 30_000


class RowCache:
    """seq -> the row's recall columns (pin apart) and the stems of its index text."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._rows: OrderedDict[int, tuple] = OrderedDict()   # LRU order
        self._stems: dict[int, Counter] = {}

    def rows(self, con: Conn, seqs: Sequence[int]) -> dict[int, tuple[str, tuple]]:
        """seq -> (status, RECALL_COLUMNS of that version) for the versions the table still has
        (keywords.rows_by_seq's answer)."""
        seqs = sorted({int(q) for q in seqs})
        if not seqs:
            return {}
        held = self._get(seqs)
        if len(held) < len(seqs):  # one lookup of every column, as without the cache (one round trip)
            got = con.execute(f"SELECT seq, status, {RECALL_COLUMNS} FROM memories WHERE seq IN ({_ints(seqs)})").fetchall()
            self._put({r[0]: r[2:] for r in got if r[0] not in held})
            return {r[0]: (r[1], r[2:]) for r in got}
        got = con.execute(f"SELECT seq, status, pinned FROM memories WHERE seq IN ({_ints(seqs)})").fetchall()
        return {q: (status, self.with_pin(held[q], pinned)) for q, status, pinned in got}

    def held(self, seqs: Sequence[int]) -> dict[int, tuple]:
        """The rows held of these versions (their pin as last read: see `with_pin`)."""
        return self._get(seqs)

    @staticmethod
    def with_pin(row: tuple, pinned: bool) -> tuple:
        return (*row[:_PINNED], pinned, *row[_PINNED + 1:])

    def stems(self, con: Conn, seqs: Sequence[int]) -> dict[int, Counter]:
        """seq -> the stem counts of that version's index text (versions the table still has)."""
        from memory.store.tokens import stems_of

        seqs = sorted({int(q) for q in seqs})
        with self._lock:
            out = {q: c for q in seqs if (c := self._stems.get(q)) is not None}
        missing = [q for q in seqs if q not in out]
        if missing:
            got = con.execute(f"SELECT seq, search_text FROM memories WHERE seq IN ({_ints(missing)})").fetchall()
            made = {q: Counter(toks) for (q, _), toks in zip(got, stems_of([t or "" for _, t in got]))}
            with self._lock:
                for q, c in made.items():
                    if q in self._rows:     # kept only beside a held row (it bounds their number)
                        self._stems[q] = c
            out |= made
        return out

    def drop_spaces(self, spaces: Sequence[str]) -> None:
        """Let go of every row of these spaces (erased, or rewritten after a forget)."""
        gone = set(spaces)
        with self._lock:
            for q in [q for q, r in self._rows.items() if r[_SPACE] in gone]:
                del self._rows[q]
                self._stems.pop(q, None)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._stems.clear()

    def _get(self, seqs: Sequence[int]) -> dict[int, tuple]:
        with self._lock:
            out = {}
            for q in seqs:
                r = self._rows.get(q)
                if r is not None:
                    self._rows.move_to_end(q)
                    out[q] = r
            return out

    def _put(self, rows: dict[int, tuple]) -> None:
        with self._lock:
            for q, r in rows.items():
                self._rows[q] = r
                self._rows.move_to_end(q)
            while len(self._rows) > self.max_rows:
                q, _ = self._rows.popitem(last=False)
                self._stems.pop(q, None)


def _ints(values: Sequence[int]) -> str:
    """A constant IN list of integers (an index scan; a bound list parameter is a join)."""
    return ", ".join(str(int(v)) for v in values)


# The row cache of a store (one per Store object, made on first use).
rows_for: PerStore[RowCache] = PerStore(lambda store: RowCache())
