"""Vector candidates: the top-n memories of the allowed spaces by cosine similarity.

Embeddings are unit vectors, so cosine is the inner product. The space filter is in the SQL
(DuckDB's HNSW index filters after its top-k and returns too few rows for a small space, so
per-space search does not depend on it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory.store import Conn, vector_literal


def vector_candidates(con: Conn, qvec: np.ndarray, space_ids: Sequence[str], n: int,
                      kinds: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """Top `n` (id, cosine) among active memories of the allowed spaces."""
    kind_filter = "AND kind IN (SELECT unnest($kinds))" if kinds else ""
    params: dict = {"q": vector_literal(qvec), "spaces": list(space_ids), "n": n}
    if kinds:
        params["kinds"] = list(kinds)
    rows = con.execute(
        f"""SELECT id, array_inner_product(embedding, $q::VARCHAR::FLOAT[{len(qvec)}]) AS sim FROM memories
            WHERE space_id IN (SELECT unnest($spaces)) AND status = 'active' AND embedding IS NOT NULL {kind_filter}
            ORDER BY sim DESC LIMIT $n""",
        params,
    ).fetchall()
    return [(r[0], float(r[1])) for r in rows]
