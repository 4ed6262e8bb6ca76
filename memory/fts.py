"""Keyword search: BM25 over DuckDB's FTS index, plus direct scoring of rows the index has not
seen yet (DuckDB's FTS index does not update on insert).

Both halves use the index's own tables (dict, terms, docs, stats) and the same BM25 formula
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))
    score  = sum_t idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))
so scores from indexed and fresh rows rank together. The space filter is part of the SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from memory.store import Conn, Store

log = logging.getLogger(__name__)

FTS_SCHEMA = "fts_main_memories"
K1, B = 1.2, 0.75


def rebuild_index(store: Store) -> int:
    """Rebuild the FTS index over every memory; returns the watermark (max seq) it covers."""

    def build(con: Conn) -> int:
        wm = con.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0]
        con.execute(
            "PRAGMA create_fts_index('memories', 'id', 'search_text', stemmer='porter', "
            "stopwords='none', ignore='\\s+', strip_accents=1, lower=1, overwrite=1)"
        )
        Store.meta_set(con, "fts_seq", str(wm))
        return wm

    wm = store.write(build)
    log.info("FTS index rebuilt up to seq %s", wm)
    return wm


def watermark(con: Conn) -> int:
    """The highest seq the FTS index covers (0 when there is no index yet)."""
    row = con.execute("SELECT value FROM meta WHERE key = 'fts_seq'").fetchone()
    return int(row[0]) if row else 0


def fresh_count(con: Conn) -> int:
    return con.execute("SELECT count(*) FROM memories WHERE seq > ?", [watermark(con)]).fetchone()[0]


def keyword_candidates(con: Conn, terms: Sequence[str], space_ids: Sequence[str], limit: int,
                       kinds: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """Top `limit` (id, bm25) among active memories of the allowed spaces."""
    if not terms or not space_ids:
        return []
    wm = watermark(con)
    kind_filter = "AND kind IN (SELECT unnest($kinds))" if kinds else ""
    indexed = wm > 0
    # Rows covered by the index are scored from its tables; rows past the watermark from their
    # own text. Statistics (N, df, avgdl) combine both so the scores are comparable.
    sql = f"""
    WITH q AS (SELECT DISTINCT stem(strip_accents(lower(t)), 'porter') AS t FROM (SELECT unnest($terms) AS t)),
    allowed AS (
        SELECT id, seq, search_text FROM memories
        WHERE space_id IN (SELECT unnest($spaces)) AND status = 'active' {kind_filter}
    ),
    fresh_tok AS (
        SELECT id, stem(tok, 'porter') AS t
        FROM (SELECT id, unnest(string_split(strip_accents(lower(search_text)), ' ')) AS tok
              FROM memories WHERE seq > $wm AND status = 'active')
        WHERE tok <> ''
    ),
    fresh_len AS (SELECT id, count(*) AS len FROM fresh_tok GROUP BY id),
    fresh_df AS (SELECT t, count(DISTINCT id) AS df FROM fresh_tok WHERE t IN (SELECT t FROM q) GROUP BY t),
    idx_stats AS (
        {"SELECT num_docs AS n, avgdl FROM " + FTS_SCHEMA + ".stats" if indexed else "SELECT 0 AS n, 0.0 AS avgdl"}
    ),
    stats AS (
        SELECT (SELECT n FROM idx_stats) + (SELECT count(*) FROM fresh_len) AS n,
               ((SELECT n * avgdl FROM idx_stats) + (SELECT coalesce(sum(len), 0) FROM fresh_len))
                 / greatest(1, (SELECT n FROM idx_stats) + (SELECT count(*) FROM fresh_len)) AS avgdl
    ),
    idx_df AS (
        {"SELECT term AS t, df FROM " + FTS_SCHEMA + ".dict WHERE term IN (SELECT t FROM q)" if indexed else "SELECT NULL::VARCHAR AS t, 0 AS df WHERE false"}
    ),
    df AS (
        SELECT q.t, coalesce(i.df, 0) + coalesce(f.df, 0) AS df
        FROM q LEFT JOIN idx_df i ON i.t = q.t LEFT JOIN fresh_df f ON f.t = q.t
    ),
    idx_tf AS (
        {f'''SELECT d.name AS id, di.term AS t, count(*) AS tf, any_value(d.len) AS len
        FROM {FTS_SCHEMA}.dict di
        JOIN {FTS_SCHEMA}.terms tr ON tr.termid = di.termid
        JOIN {FTS_SCHEMA}.docs d ON d.docid = tr.docid
        JOIN allowed a ON a.id = d.name AND a.seq <= $wm
        WHERE di.term IN (SELECT t FROM q)
        GROUP BY d.name, di.term''' if indexed else "SELECT NULL::VARCHAR AS id, NULL::VARCHAR AS t, 0 AS tf, 0 AS len WHERE false"}
    ),
    fresh_tf AS (
        SELECT ft.id, ft.t, count(*) AS tf, any_value(fl.len) AS len
        FROM fresh_tok ft JOIN fresh_len fl ON fl.id = ft.id
        JOIN allowed a ON a.id = ft.id
        WHERE ft.t IN (SELECT t FROM q)
        GROUP BY ft.id, ft.t
    ),
    tf AS (SELECT * FROM idx_tf UNION ALL SELECT * FROM fresh_tf)
    SELECT tf.id,
           sum(ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
               * tf.tf * ({K1} + 1) / (tf.tf + {K1} * (1 - {B} + {B} * tf.len / greatest(s.avgdl, 1e-9)))) AS score
    FROM tf JOIN df ON df.t = tf.t CROSS JOIN stats s
    GROUP BY tf.id
    ORDER BY score DESC, tf.id
    LIMIT $limit
    """
    params = {"terms": list(terms), "spaces": list(space_ids), "wm": wm, "limit": limit}
    if kinds:
        params["kinds"] = list(kinds)
    return [(r[0], float(r[1])) for r in con.execute(sql, params).fetchall()]
