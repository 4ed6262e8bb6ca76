"""The keyword tokeniser both backends share: `search_text` (jieba/regex tokens joined by
spaces) split on spaces, accents stripped, lowercased, Porter-stemmed by DuckDB's fts stemmer.

DuckDB tokenises in the SQL that builds and scores its index. PostgreSQL has neither that
stemmer nor `strip_accents` (its `english_stem` is Snowball's Porter2, which stems differently),
so its backend tokenises here, in an in-memory DuckDB with the same expressions: the postings,
the document frequencies and so the BM25 rankings are the same on both backends.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from memory.store.connection import Conn, connect

# The one tokeniser: SQL over a column `search_text`.
TOKENS_SQL = "unnest(string_split(strip_accents(lower(search_text)), ' '))"
STEM_SQL = "stem({tok}, 'porter')"

_local = threading.local()
_base: Conn | None = None
_base_lock = threading.Lock()


def scratch() -> Conn:
    """This thread's cursor on one in-memory DuckDB (the fts extension loaded), for tokenising.
    One database per process, not per thread: opening one and loading its extensions costs
    ~0.26 s, which every new thread paid on its first query (a cursor: ~1 ms). Building an
    index makes tables, so it takes a database of its own (`build_scratch`)."""
    global _base
    cur = getattr(_local, "con", None)
    if cur is None:
        with _base_lock:
            if _base is None:
                _base = connect(":memory:")
            cur = _local.con = _base.cursor()
    return cur


def build_scratch() -> Conn:
    """A fresh in-memory DuckDB for one index build (close it after)."""
    return connect(":memory:")


def stem_terms(terms: Sequence[str]) -> dict[str, str]:
    """Query term -> its stem ('' when nothing is left)."""
    if not terms:
        return {}
    rows = scratch().execute(
        f"SELECT t, {STEM_SQL.format(tok='strip_accents(lower(t))')} FROM (SELECT unnest(?::VARCHAR[]) AS t)",
        [list(terms)]).fetchall()
    return {t: s or "" for t, s in rows}


def stems_of(texts: Sequence[str]) -> list[list[str]]:
    """The stemmed tokens of each `search_text`, in order (empty tokens dropped)."""
    if not texts:
        return []
    rows = scratch().execute(f"""
        SELECT i, list({STEM_SQL.format(tok='tok')}) FILTER (WHERE tok <> '')
        FROM (SELECT i, {TOKENS_SQL} AS tok
              FROM (SELECT unnest(range(len(?::VARCHAR[]))) AS i, unnest(?::VARCHAR[]) AS search_text))
        GROUP BY i""", [list(texts), list(texts)]).fetchall()
    got = {int(i): toks or [] for i, toks in rows}
    return [got.get(k, []) for k in range(len(texts))]
