"""Keyword search: BM25 over a postings table built from `memories.search_text`, plus direct
scoring of rows written since the last build (so a fact stored a second ago is findable).

Why our own postings table and not DuckDB's FTS index (`PRAGMA create_fts_index`): its
`terms` table is in document order, so finding the documents of three query terms reads every
posting (2.8 M rows for 130k memories) and joins them with `docs` and `memories`, ~40-60 ms per
query. `fts_postings` has one row per (term, memory) with the memory's space, kind, term
frequency and length, written sorted by term: DuckDB's zone maps then skip every row group but
the query terms', and the space and kind filters need no join.

Both halves tokenise the same way (`search_text` split on spaces, accents stripped, lowercased,
Porter-stemmed) and share one BM25:
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))
    score  = sum_t idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))
with N, df and avgdl over the indexed and the fresh rows together, so their scores rank together.

The table is a snapshot: rows deleted, retired or rewritten since the build still have postings.
So the index half proposes its best rows and the `memories` table has the last word (the row
must exist, be active and be unchanged since the build); the space and kind filters are SQL,
always.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from memory.store import Conn, Store

log = logging.getLogger(__name__)

POSTINGS = "fts_postings"
STATS = "fts_stats"
WATERMARK_KEY = "fts_postings_seq"
OLD_FTS_SCHEMA = "fts_main_memories"  # DuckDB FTS index of earlier versions; dropped on rebuild
K1, B = 1.2, 0.75

# The one tokeniser both halves use: `search_text` is already jieba/regex tokens joined by spaces.
_TOKENS = "unnest(string_split(strip_accents(lower(search_text)), ' '))"


def rebuild_index(store: Store) -> int:
    """Rebuild the postings over every memory; returns the watermark (max seq) it covers."""

    def build(con: Conn) -> int:
        wm = con.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0]
        # ORDER BY term is what makes lookups cheap (zone maps per row group); space_id second
        # keeps one space's postings of a term together.
        con.execute(f"""
            CREATE OR REPLACE TABLE {POSTINGS} AS
            WITH tok AS (
                SELECT id, space_id, kind, stem(tok, 'porter') AS term
                FROM (SELECT id, space_id, kind, {_TOKENS} AS tok FROM memories WHERE seq <= {int(wm)})
                WHERE tok <> ''
            ),
            lens AS (SELECT id, count(*)::INTEGER AS len FROM tok GROUP BY id)
            SELECT term, space_id, kind, id, count(*)::INTEGER AS tf, any_value(lens.len) AS len
            FROM tok JOIN lens USING (id)
            GROUP BY term, space_id, kind, id
            ORDER BY term, space_id, id
        """)
        # N counts every row (also those without a token), like the FTS index did.
        con.execute(f"""
            CREATE OR REPLACE TABLE {STATS} AS
            SELECT (SELECT count(*) FROM memories WHERE seq <= {int(wm)}) AS n,
                   (SELECT coalesce(sum(tf), 0) FROM {POSTINGS}) AS total_len
        """)
        con.execute(f"DROP SCHEMA IF EXISTS {OLD_FTS_SCHEMA} CASCADE")
        Store.meta_set(con, WATERMARK_KEY, str(wm))
        return wm

    wm = store.write(build)
    log.info("keyword index rebuilt up to seq %s", wm)
    return wm


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


class _StemCache:
    """Query term -> stemmed term, via DuckDB's own stemmer (the one the index used)."""

    def __init__(self, size: int = 20_000) -> None:
        self._data: OrderedDict[str, str] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def stems(self, con: Conn, terms: Sequence[str]) -> list[str]:
        with self._lock:
            missing = [t for t in dict.fromkeys(terms) if t not in self._data]
        if missing:
            rows = con.execute(
                "SELECT t, stem(strip_accents(lower(t)), 'porter') FROM (SELECT unnest(?) AS t)", [missing]
            ).fetchall()
            with self._lock:
                for t, s in rows:
                    self._data[t] = s
                while len(self._data) > self._size:
                    self._data.popitem(last=False)
        with self._lock:
            out = [self._data.get(t) for t in terms]
        return list(dict.fromkeys(s for s in out if s))


_stems = _StemCache()


def keyword_candidates(con: Conn, terms: Sequence[str], space_ids: Sequence[str], limit: int,
                       kinds: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """Top `limit` (id, bm25) among active memories of the allowed spaces."""
    if not terms or not space_ids or limit <= 0:
        return []
    stems = _stems.stems(con, terms)
    if not stems:
        return []
    wm = watermark(con)
    over = limit * 2 + 20
    while True:
        rows, proposed, verified = _query(con, stems, space_ids, limit, kinds, wm, over)
        # Exact when the index half's slice held at least `limit` live rows (everything beyond it
        # scores lower), or when the slice was not full (it held every candidate).
        if proposed < over or verified >= limit:
            return rows
        log.debug("keyword slice of %d had %d live rows; widening", over, verified)
        over *= 4


def _query(con: Conn, stems: list[str], space_ids: Sequence[str], limit: int, kinds: Sequence[str] | None,
           wm: int, over: int) -> tuple[list[tuple[str, float]], int, int]:
    """One round: the index half's best `over` rows (checked against the table) and every fresh
    row, merged; also returns how many rows the index half proposed and how many were live."""
    t_in = sql_strings(stems)
    s_in = sql_strings(space_ids)
    kinds_in = f"AND kind IN ({sql_strings(kinds)})" if kinds else ""
    p_kinds_in = f"AND p.kind IN ({sql_strings(kinds)})" if kinds else ""
    bm25 = f"w.idf * {{tf}} * ({K1} + 1) / ({{tf}} + {K1} * (1 - {B} + {B} * {{len}} / greatest(w.avgdl, 1e-9)))"
    if wm > 0:
        idx = f"""
        p AS (SELECT term, space_id, kind, id, tf, len FROM {POSTINGS} WHERE term IN ({t_in})),
        idx_df AS (SELECT term AS t, count(*) AS df FROM p GROUP BY term),
        idx_stats AS (SELECT n, total_len FROM {STATS}),"""
        idx_top = f"""
        idx_top AS MATERIALIZED (
            SELECT p.id, sum({bm25.format(tf="p.tf", len="p.len")}) AS score
            FROM p JOIN idw w ON w.t = p.term
            WHERE p.space_id IN ({s_in}) {p_kinds_in}
            GROUP BY p.id
            ORDER BY round(score, 9) DESC, p.id
            LIMIT {int(over)}
        ),
        -- The snapshot proposes; the table decides: the row still exists, is active and unchanged.
        idx_live AS (
            SELECT t.id, t.score FROM idx_top t JOIN memories m ON m.id = t.id
            WHERE m.status = 'active' AND m.seq <= {int(wm)}
        ),"""
    else:
        idx = """
        idx_df AS (SELECT NULL::VARCHAR AS t, 0 AS df WHERE false),
        idx_stats AS (SELECT 0 AS n, 0 AS total_len),"""
        idx_top = """
        idx_top AS (SELECT NULL::VARCHAR AS id, 0.0::DOUBLE AS score WHERE false),
        idx_live AS (SELECT id, score FROM idx_top),"""
    sql = f"""
    WITH {idx}
    fresh_tok AS (
        SELECT id, space_id, kind, stem(tok, 'porter') AS t
        FROM (SELECT id, space_id, kind, {_TOKENS} AS tok FROM memories WHERE seq > {int(wm)} AND status = 'active')
        WHERE tok <> ''
    ),
    fresh_len AS (SELECT id, count(*) AS len FROM fresh_tok GROUP BY id),
    fresh_df AS (SELECT t, count(DISTINCT id) AS df FROM fresh_tok WHERE t IN ({t_in}) GROUP BY t),
    stats AS (
        SELECT (SELECT n FROM idx_stats) + (SELECT count(*) FROM fresh_len) AS n,
               ((SELECT total_len FROM idx_stats) + (SELECT coalesce(sum(len), 0) FROM fresh_len))
                 / greatest(1, (SELECT n FROM idx_stats) + (SELECT count(*) FROM fresh_len)) AS avgdl
    ),
    df AS (
        SELECT q.t, coalesce(i.df, 0) + coalesce(f.df, 0) AS df
        FROM (SELECT unnest([{t_in}]) AS t) q LEFT JOIN idx_df i ON i.t = q.t LEFT JOIN fresh_df f ON f.t = q.t
    ),
    idw AS (SELECT df.t, ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) AS idf, s.avgdl FROM df CROSS JOIN stats s),
    {idx_top}
    fresh_scored AS (
        SELECT ft.id, sum({bm25.format(tf="ft.tf", len="fl.len")}) AS score
        FROM (SELECT id, t, count(*) AS tf FROM fresh_tok
              WHERE t IN ({t_in}) AND space_id IN ({s_in}) {kinds_in} GROUP BY id, t) ft
        JOIN fresh_len fl ON fl.id = ft.id JOIN idw w ON w.t = ft.t
        GROUP BY ft.id
    ),
    top AS (
        SELECT id, score FROM (SELECT id, score FROM idx_live UNION ALL SELECT id, score FROM fresh_scored)
        ORDER BY round(score, 9) DESC, id LIMIT {int(limit)}
    ),
    counts AS (SELECT (SELECT count(*) FROM idx_top) AS proposed, (SELECT count(*) FROM idx_live) AS verified)
    SELECT c.proposed, c.verified, top.id, top.score FROM counts c LEFT JOIN top ON true
    ORDER BY round(top.score, 9) DESC NULLS LAST, top.id
    """
    rows = con.execute(sql).fetchall()
    hits = [(r[2], float(r[3])) for r in rows if r[2] is not None]
    return hits, int(rows[0][0]), int(rows[0][1])
