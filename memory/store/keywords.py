"""Keyword search: BM25 over a postings table built from `memories.search_text`, plus direct
scoring of rows written since the last build (so a fact stored a second ago is findable).

Why our own postings table and not DuckDB's FTS index (`PRAGMA create_fts_index`): its
`terms` table is in document order, so finding the documents of three query terms reads every
posting (2.8 M rows for 130k memories) and joins them with `docs` and `memories`: ~40-60 ms
per query at that size. `fts_postings` has one row per (term, memory version) with the
memory's space, kind, term frequency and length, written sorted by term: DuckDB's zone maps
skip every row group but the query terms', and the space and kind filters need no join. A
memory version is its `seq` (unique, and new on every text change), an integer: grouping and
joining on it is cheaper than on the id string.

Both halves tokenise the same way (`search_text` split on spaces, accents stripped, lowercased,
Porter-stemmed) and share one BM25:
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))
    score  = sum_t idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))
with N, df and avgdl over the indexed and the fresh rows together, so their scores rank
together; ties go to the older row version, the smaller seq (scores compared at 9 decimals, so the summation order
does not matter).

The table is a snapshot: rows deleted, retired or rewritten since the build still have
postings. So the index proposes its best rows and the `memories` table has the last word: the
row with that seq must still exist and be active. The slice widens until it holds enough live
rows, so the answer is exact.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from memory.store.connection import Conn, Store
from memory.store.dialect import dialect_of
from memory.store.fresh_rows import FreshRows
from memory.store.tokens import STEM_SQL, TOKENS_SQL, build_scratch, stem_terms
from memory.store.row_cache import RECALL_COLUMNS, RowCache
from memory.store.postings_cache import (DICT, POSTINGS, STATS, WATERMARK_KEY, IndexVersion, PostingsCache, bump_generation,
                                         index_version)

log = logging.getLogger(__name__)

OLD_FTS_SCHEMA = "fts_main_memories"  # DuckDB FTS index of earlier versions; dropped on rebuild
K1, B = 1.2, 0.75



def rebuild_index(store: Store) -> int:
    """Rebuild the postings over every memory; returns the watermark (max seq) it covers."""

    def build(con: Conn) -> int:
        wm = int(con.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0])
        if dialect_of(con).postgres:
            _build_elsewhere(con, wm)
        else:
            for sql in _build_sql("memories", wm):
                con.execute(sql)
            con.execute(f"DROP SCHEMA IF EXISTS {OLD_FTS_SCHEMA} CASCADE")
        Store.meta_set(con, WATERMARK_KEY, str(wm))
        bump_generation(con)
        return wm

    wm = store.write(build)
    log.info("keyword index rebuilt up to seq %s", wm)
    return wm


def _build_sql(source: str, wm: int) -> list[str]:
    """The statements that build the postings, the dictionary and the statistics from `source`
    (a table with seq, space_id, kind, search_text)."""
    # ORDER BY term is what makes lookups cheap (zone maps per row group); space_id second
    # keeps one space's postings of a term together.
    return [f"""
        CREATE OR REPLACE TABLE {POSTINGS} AS
        WITH tok AS (
            SELECT seq AS doc, space_id, kind, {STEM_SQL.format(tok='tok')} AS term
            FROM (SELECT seq, space_id, kind, {TOKENS_SQL} AS tok FROM {source} WHERE seq <= {wm})
            WHERE tok <> ''
        ),
        lens AS (SELECT doc, count(*)::INTEGER AS len FROM tok GROUP BY doc)
        SELECT term, space_id, kind, doc, count(*)::INTEGER AS tf, any_value(lens.len) AS len
        FROM tok JOIN lens USING (doc)
        GROUP BY term, space_id, kind, doc
        ORDER BY term, space_id, doc
    """,
        f"CREATE OR REPLACE TABLE {DICT} AS SELECT term, count(*) AS df FROM {POSTINGS} GROUP BY term ORDER BY term",
        # N counts every row (also those without a token), like the FTS index did.
        f"""
        CREATE OR REPLACE TABLE {STATS} AS
        SELECT (SELECT count(*) FROM {source} WHERE seq <= {wm}) AS n,
               (SELECT coalesce(sum(tf), 0) FROM {POSTINGS}) AS total_len
    """]


# PostgreSQL's tables of the postings; (space_id, term) serves the per-space lookups.
_PG_TABLES = f"""
    DROP TABLE IF EXISTS {POSTINGS}; DROP TABLE IF EXISTS {DICT}; DROP TABLE IF EXISTS {STATS};
    CREATE TABLE {POSTINGS} (term VARCHAR NOT NULL, space_id VARCHAR NOT NULL, kind VARCHAR NOT NULL,
                             doc BIGINT NOT NULL, tf INTEGER NOT NULL, len INTEGER NOT NULL);
    CREATE TABLE {DICT} (term VARCHAR PRIMARY KEY, df BIGINT NOT NULL);
    CREATE TABLE {STATS} (n BIGINT NOT NULL, total_len BIGINT NOT NULL);
"""


def _build_elsewhere(con: Conn, wm: int) -> None:
    """PostgreSQL: the rows are tokenised and the tables built by the same statements in an
    in-memory DuckDB (memory/store/tokens.py), then copied in (inside the caller's transaction,
    so readers see the old index or the new one)."""
    rows = con.execute("SELECT seq, space_id, kind, search_text FROM memories WHERE seq <= ?", [wm]).fetchall()
    duck = build_scratch()
    cols = list(zip(*rows)) if rows else [[], [], [], []]
    duck.execute("CREATE OR REPLACE TEMP TABLE src AS SELECT unnest(?::BIGINT[]) AS seq, unnest(?::VARCHAR[]) AS space_id, "
                 "unnest(?::VARCHAR[]) AS kind, unnest(?::VARCHAR[]) AS search_text", [list(c) for c in cols])
    try:
        for sql in _build_sql("src", wm):
            duck.execute(sql)
        con.execute(_PG_TABLES)
        for table, names in ((POSTINGS, "term, space_id, kind, doc, tf, len"), (DICT, "term, df"), (STATS, "n, total_len")):
            con.copy_rows(table, names, duck.execute(f"SELECT {names} FROM {table}").fetchall())
        con.execute(f"CREATE INDEX {POSTINGS}_space_term ON {POSTINGS} (space_id, term)")
        con.execute(f"ANALYZE {POSTINGS}")
    finally:
        duck.close()


def watermark(con: Conn) -> int:
    """The highest seq the postings cover (0 when there are none yet: every row is fresh)."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [WATERMARK_KEY]).fetchone()
    return int(row[0]) if row else 0


def fresh_count(con: Conn) -> int:
    return con.execute("SELECT count(*) FROM memories WHERE seq > ?", [watermark(con)]).fetchone()[0]


def sql_strings(values: Sequence[str]) -> str:
    """Values as a list of SQL string literals, quotes doubled (DuckDB strings have no backslash
    escapes). Used where a constant IN list lets DuckDB prune by zone maps or push the filter
    into the scan, which a bound list parameter does not."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


def _double(x: float) -> str:
    """A float as a DOUBLE literal that reads back exactly (a bare 0.75 is a DECIMAL in DuckDB,
    and DECIMAL arithmetic doubles the cost of scoring)."""
    r = repr(float(x))
    return r if ("e" in r or "n" in r) else f"{r}e0"


class _Lru:
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._data: OrderedDict = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            val = self._data.get(key)
            if val is not None:
                self._data.move_to_end(key)
            return val

    def put(self, key, val) -> None:
        with self._lock:
            self._data[key] = val
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)


# Query term -> stem, by DuckDB's own stemmer (the one the index used). Deterministic.
_stems = _Lru(20_000)
# The fresh rows of each store, beside (and gone with) its postings cache: one per store.
_fresh_of: weakref.WeakKeyDictionary[PostingsCache, FreshRows] = weakref.WeakKeyDictionary()
_fresh_lock = threading.Lock()


def fresh_rows_of(cache: PostingsCache) -> FreshRows:
    with _fresh_lock:
        got = _fresh_of.get(cache)
        if got is None:
            got = _fresh_of[cache] = FreshRows()
        return got


def _stem(terms: Sequence[str]) -> list[str]:
    missing = [t for t in dict.fromkeys(terms) if _stems.get(t) is None]
    for t, s in stem_terms(missing).items():
        _stems.put(t, s)
    return list(dict.fromkeys(s for s in (_stems.get(t) for t in terms) if s))


def keyword_candidates(con: Conn, terms: Sequence[str], space_ids: Sequence[str], limit: int,
                       kinds: Sequence[str] | None = None, cache: PostingsCache | None = None) -> list[tuple[str, float]]:
    """Top `limit` (id, bm25) among active memories of the allowed spaces."""
    return keyword_search(con, terms, space_ids, limit, kinds, cache=cache)[0]


def keyword_search(con: Conn, terms: Sequence[str], space_ids: Sequence[str], limit: int,
                   kinds: Sequence[str] | None = None, columns: str = "id",
                   cache: PostingsCache | None = None, also: Iterable[int] = (),
                   ids: Callable[[Sequence[int]], dict[int, str]] | None = None,
                   stats_out: dict | None = None, rows: RowCache | None = None,
                   version: IndexVersion | None = None) -> tuple[list[tuple[str, float]], dict[str, tuple]]:
    """`keyword_candidates`, plus the `columns` (starting with id) of the indexed rows it
    checked against the table: recall reads its candidates' rows anyway, and each row looked up
    costs ~35 us, so the check that proves a row live also hands it over. With a `cache`, the
    index is scored from memory (the same scores; see postings_cache). `also`: seqs of other
    rows the caller wants (recall's vector candidates), read in the same lookup and handed over
    when active; the caller fetches any that did not come (no index yet, no query term).
    `ids` names the ids of row versions the caller holds (recall's vector cache): those rows'
    ids are not read from the table (see `_check`); `rows` (recall's, for its columns) holds
    whole row versions (memory/store/row_cache.py). `version`: the index's, when the caller has
    just read it (recall, with the vector cache's catch-up). `stats_out` receives the query's statistics:
    "idf" and "df" per query stem (a stem no memory holds has df 0 and the largest idf) and
    "avgdl": recall's calibration weighs a score by what the query could have matched, and its
    second step scores runs of messages with the same BM25. The rows written since the index's
    build are held beside the `cache` (memory/store/fresh_rows.py); without one they are read
    and tokenised whole on every call (bench/keyword_fresh.py): callers that search often pass
    the store's postings cache."""
    if not terms or not space_ids or limit <= 0:
        return [], {}
    stems = _stem(terms)
    if not stems:
        return [], {}
    version = version or index_version(con)
    wm = version.watermark
    allowed, kinds_ok = set(space_ids), set(kinds) if kinds else None
    # Statistics over the indexed and the fresh rows together.
    stats = cache.stats(con, version, stems) if cache is not None and wm > 0 else None
    if stats is None:
        stats = _index_stats(con, stems) if wm > 0 else (0, 0, dict.fromkeys(stems, 0))
    n, total_len, df = stats
    # The fresh rows as this connection sees them, held per store beside its postings cache.
    fresh = fresh_rows_of(cache) if cache is not None else FreshRows()
    with fresh.synced(con, wm) as rows_now:
        n += rows_now.n
        total_len += rows_now.total_len
        for t in stems:
            df[t] += rows_now.df(t)
        avgdl = max(total_len / max(1, n), 1e-9)
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in stems}
        # (id, score, seq): ties go to the older row version (its seq), so the order of equal
        # scores depends on what was written when, never on random ids.
        scored: list[tuple[str, float, int]] = []
        for seq, row in rows_now.having(stems):
            if row.space in allowed and (kinds_ok is None or row.kind in kinds_ok):
                counts = row.counts
                score = sum(_bm25(idf[t], counts[t], row.length, avgdl) for t in stems if t in counts)
                if score:
                    scored.append((row.id, score, seq))
    if stats_out is not None:
        stats_out.update(idf=idf, df={t: df[t] for t in stems}, avgdl=avgdl)
    found: dict[str, tuple] = {}
    extra: dict[str, tuple] = {}
    if wm > 0:
        # Rows retired since the build still have postings: a margin of 10, widened when short.
        over = limit + 10
        wanted = list(also)
        while True:
            top = cache.top(con, version, stems, idf, avgdl, space_ids, kinds, over, K1, B) if cache is not None else None
            if top is None:
                top = _index_top(con, stems, idf, avgdl, space_ids, kinds, over)
            proposed, got = _check(con, top, columns, wanted, ids, rows)
            wanted = []  # read once
            extra |= {r[0]: r for status, r in got if status == "active"}
            live = [(r[0], score, seq) for (seq, _), (score, status, r) in zip(top, proposed) if status == "active"]
            # Exact when the slice held `limit` live rows (everything outside it scores lower)
            # or was not full (it held every candidate).
            if len(proposed) < over or len(live) >= limit:
                break
            log.debug("keyword slice of %d had %d live rows; widening", over, len(live))
            over *= 4
        scored += live
        found = {r[0]: r for _, status, r in proposed if status == "active"}
    scored.sort(key=lambda x: (-round(x[1], 9), x[2]))
    best = [(d, sc) for d, sc, _ in scored[:limit]]
    return best, extra | {d: found[d] for d, _ in best if d in found}


def _bm25(idf: float, tf: int, length: int, avgdl: float) -> float:
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))


def _index_stats(con: Conn, stems: list[str]) -> tuple[int, int, dict[str, int]]:
    rows = con.execute(
        f"SELECT s.n, s.total_len, d.term, d.df FROM {STATS} s "
        f"LEFT JOIN (SELECT term, df FROM {DICT} WHERE term IN ({sql_strings(stems)})) d ON true"
    ).fetchall()
    df = dict.fromkeys(stems, 0)
    df.update({r[2]: int(r[3]) for r in rows if r[2] is not None})
    return int(rows[0][0]), int(rows[0][1]), df


def _index_top(con: Conn, stems: list[str], idf: dict[str, float], avgdl: float, space_ids: Sequence[str],
               kinds: Sequence[str] | None, over: int) -> list[tuple[int, float]]:
    """The index's best `over` (seq, score) of the allowed spaces, and every row tied with the
    last of them at 9 decimals."""
    weight = "CASE term " + " ".join(f"WHEN {sql_strings([t])} THEN {_double(idf[t])}" for t in stems) + " END"
    kind_filter = f"AND kind IN ({sql_strings(kinds)})" if kinds else ""
    d = dialect_of(con)
    rows = con.execute(f"""
        WITH scored AS MATERIALIZED (
            SELECT doc, sum({weight} * tf * {_double(K1 + 1)}
                            / (tf + {_double(K1)} * ({_double(1 - B)} + {_double(B)} * len / {_double(avgdl)}))) AS score
            FROM {POSTINGS}
            WHERE term IN ({sql_strings(stems)}) AND space_id IN ({sql_strings(space_ids)}) {kind_filter}
            GROUP BY doc
        ),
        cut AS (SELECT {d.round9("score")} AS r FROM scored ORDER BY r DESC LIMIT 1 OFFSET {int(over) - 1})
        SELECT doc, score FROM scored WHERE {d.round9("score")} >= coalesce((SELECT r FROM cut), -1e308)
    """).fetchall()
    return [(int(d), float(sc)) for d, sc in rows]


def _check(con: Conn, rows: Sequence[tuple[int, float]], columns: str, also: Sequence[int] = (),
           ids: Callable[[Sequence[int]], dict[int, str]] | None = None,
           held: RowCache | None = None) -> tuple[list[tuple[float, str | None, tuple]], list[tuple[str, tuple]]]:
    """The index proposed (seq, score); the table decides: (score, status, row) with the status
    and `columns` of the row version the posting was built from (None and () when it is gone
    or was rewritten). Rows of the `also` seqs come back beside them as (status, row)."""
    seqs = sorted({int(d) for d, _ in rows} | {int(d) for d in also})
    if not seqs:
        return [], []
    # A separate lookup, not a join: a constant `seq IN` list is an index scan (~1 ms), the
    # join reads every row's seq (~4 ms at 130k rows).
    current = rows_by_seq(con, seqs, columns, ids, held)
    return ([(float(score), *current[d]) if d in current else (float(score), None, ()) for d, score in rows],
            [current[d] for d in also if d in current])


def rows_by_seq(con: Conn, seqs: Sequence[int], columns: str,
                ids: Callable[[Sequence[int]], dict[int, str]] | None = None,
                held: RowCache | None = None) -> dict[int, tuple[str, tuple]]:
    """seq -> (status, `columns` of that row version) for the versions the table still has.

    DuckDB stores ids FSST-compressed in segments of ~26k rows, and reading one row's id decodes
    the offsets from its segment's start: the id column was ~70% of a recall's row lookups
    (callgrind). When `columns` starts with the id, ids that `ids` knows (recall's vector cache
    holds the id of every row version it scores) are not read; the rest come in a second lookup.
    """
    if not seqs:
        return {}
    if held is not None and columns == RECALL_COLUMNS:
        return held.rows(con, seqs)  # only the status and pin of versions seen before are read
    in_list = ", ".join(str(int(q)) for q in seqs)
    known = ids(seqs) if ids is not None and columns.startswith("id, ") else {}
    if not known:
        return {r[0]: (r[1], r[2:]) for r in con.execute(
            f"SELECT seq, status, {columns} FROM memories WHERE seq IN ({in_list})").fetchall()}
    got = con.execute(f"SELECT seq, status, {columns[4:]} FROM memories WHERE seq IN ({in_list})").fetchall()
    unknown = [r[0] for r in got if r[0] not in known]
    if unknown:
        known = known | dict(con.execute(
            f"SELECT seq, id FROM memories WHERE seq IN ({', '.join(map(str, unknown))})").fetchall())
    return {r[0]: (r[1], (known[r[0]], *r[2:])) for r in got if r[0] in known}


def drop_postings(con: Conn, seqs: Sequence[int]) -> int:
    """Remove the postings of these memory versions (forgotten text must leave the index too).

    Document frequencies and the length total are lowered by what the versions held; a term no
    other memory uses leaves the dictionary. Returns the postings removed.
    """
    have = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name IN (?, ?, ?)",
        [POSTINGS, DICT, STATS]).fetchall()}
    if not seqs or POSTINGS not in have:
        return 0
    gone = con.execute(f"""SELECT term, count(*) AS docs, sum(tf) AS tf FROM {POSTINGS}
                           WHERE doc IN (SELECT unnest(?)) GROUP BY term""", [list(seqs)]).fetchall()
    if not gone:
        return 0
    docs = con.execute(f"SELECT count(DISTINCT doc) FROM {POSTINGS} WHERE doc IN (SELECT unnest(?))", [list(seqs)]).fetchone()[0]
    con.execute(f"DELETE FROM {POSTINGS} WHERE doc IN (SELECT unnest(?))", [list(seqs)])
    bump_generation(con)  # cached copies of the postings are stale now
    if DICT in have:
        con.execute(f"""UPDATE {DICT} SET df = {DICT}.df - g.docs
                        FROM (SELECT unnest(?) AS term, unnest(?) AS docs) g WHERE {DICT}.term = g.term""",
                    [[g[0] for g in gone], [int(g[1]) for g in gone]])
        con.execute(f"DELETE FROM {DICT} WHERE df <= 0")
    if STATS in have:
        con.execute(f"UPDATE {STATS} SET n = greatest(n - ?, 0), total_len = greatest(total_len - ?, 0)",
                    [int(docs), int(sum(g[2] for g in gone))])
    return sum(int(g[1]) for g in gone)
