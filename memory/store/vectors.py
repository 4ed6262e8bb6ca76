"""Vector candidates: the top-n memories of the allowed spaces by cosine similarity.

Embeddings are unit vectors, so cosine is the inner product. Two paths return the same rows:

- `vector_candidates(con, ...)`: exact, in SQL, on any connection (also inside a write
  transaction). DuckDB reads the vectors of every row group holding a row of the allowed spaces
  and decompresses them (floats are stored ALP-compressed): in a 130k-row table ~2 ms for a
  1k-row space, ~28 ms for 10k, ~100 ms for 100k. The space filter is in the SQL (DuckDB's
  HNSW index filters after its top-k and returns too few rows for a small space, so per-space
  search does not depend on it).
- `VectorCache`: the vectors of the spaces recall searches live in numpy matrices in this
  process (a matrix-vector product over 100k x 384 is ~4 ms). Memory only proposes: the best
  rows are checked against the table in SQL on the caller's connection (the row exists, is
  active, is in an allowed space, is of an allowed kind) and the slice widens until `n` rows
  pass, so the answer is the SQL path's. Recall checks the proposal with the query that
  fetches its rows anyway (`propose` / `settle`), so the check costs no extra round trip.

Keeping the matrices current: every search first reads the rows whose `seq` is above the
highest one the cache has seen (`seq` grows on every insert and text change, so DuckDB's zone
maps skip the old row groups). A row that a check finds inactive or gone is dropped from its
matrix; rows never return to 'active' without a new `seq` (memory_forget, supersede and archive
are one-way), and a new `seq` re-adds them. A change of embedding model or dimension (reembed)
empties the cache.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from memory.store.connection import Conn, PerStore, Store, vector_literal
from memory.store.dialect import dialect_of

log = logging.getLogger(__name__)

# Every space recall searches is held (a 1k-row space costs 1.5 MB): from a few thousand rows
# up, the SQL scan is the slowest part of recall, and memory lets recall check the proposal in
# the row fetch it does anyway. Above CACHE_MAX_BYTES the least recently searched spaces go.
CACHE_MIN_ROWS = 0
CACHE_MAX_BYTES = 1 << 30     # ~700k vectors of 384 floats across all cached spaces


def vector_candidates(con: Conn, qvec: np.ndarray, space_ids: Sequence[str], n: int,
                      kinds: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """Top `n` (id, cosine) among active memories of the allowed spaces."""
    if not space_ids or n <= 0:
        return []
    params: dict = {"q": vector_literal(qvec), "spaces": list(space_ids), "n": n}
    if kinds:
        params["kinds"] = list(kinds)
    if dialect_of(con).postgres:
        rows = _pg_candidates(con, params, len(qvec), bool(kinds))
    else:
        kind_filter = "AND kind IN (SELECT unnest($kinds))" if kinds else ""
        rows = con.execute(
            f"""SELECT id, array_inner_product(embedding, $q::VARCHAR::FLOAT[{len(qvec)}]) AS sim FROM memories
                WHERE space_id IN (SELECT unnest($spaces)) AND status = 'active' AND embedding IS NOT NULL {kind_filter}
                ORDER BY sim DESC, id LIMIT $n""",
            params,
        ).fetchall()
    return [(r[0], float(r[1])) for r in rows]


def _pg_candidates(con: Conn, params: dict, dim: int, kinds: bool) -> list[tuple]:
    """PostgreSQL: the HNSW index walked with iterative scans, so a filter that keeps 1% of the
    rows still yields `n` of them (pgvector 0.8: `relaxed_order` may return them slightly out of
    order, hence the outer sort); ef_search 200 keeps recall at 1.00 on a 1% space of 100k."""
    con.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    con.execute("SET LOCAL hnsw.ef_search = 200")
    kind_filter = "AND kind = ANY($kinds::VARCHAR[])" if kinds else ""
    return con.execute(
        f"""SELECT id, sim FROM (
                SELECT id, 1 - (embedding <=> $q::vector({dim})) AS sim FROM memories
                WHERE space_id = ANY($spaces::VARCHAR[]) AND status = 'active' AND embedding IS NOT NULL {kind_filter}
                ORDER BY embedding <=> $q::vector({dim}) LIMIT $n) AS near
            ORDER BY sim DESC, id""",
        params,
    ).fetchall()


def fetch_vectors(con: Conn, ids: Sequence[str]) -> dict[str, np.ndarray]:
    """Stored vectors of `ids` (no filter: the caller has already checked the rows).

    `fetchnumpy` hands DuckDB's arrays over as numpy arrays: ~1 ms for 180 rows, where
    `fetchall` builds Python tuples of floats (~8 ms).
    """
    if not ids:
        return {}
    got = con.execute(
        f"SELECT id, embedding FROM memories WHERE id IN ({_in_list(ids)}) AND embedding IS NOT NULL"
    ).fetchnumpy()
    return {i: np.asarray(v, dtype=np.float32) for i, v in zip(got["id"], got["embedding"])}


def _in_list(values: Sequence[str]) -> str:
    """A constant IN list (quotes doubled): DuckDB pushes it into the scan, which a bound list
    parameter joined through unnest() does not (~1.6 ms against ~3 ms for 100 ids in 130k rows)."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


@dataclass
class _Space:
    """One space's vectors: rows [0, size) of `mat` are live unless `alive` says otherwise."""

    dim: int
    ids: list[str] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)
    mat: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: np.ndarray = field(default=None)  # type: ignore[assignment]  # int8 codes
    alive: np.ndarray = field(default=None)  # type: ignore[assignment]
    size: int = 0

    def __post_init__(self) -> None:
        self.mat = np.zeros((0, self.dim), dtype=np.float32)
        self.kind = np.zeros(0, dtype=np.int8)
        self.alive = np.zeros(0, dtype=bool)

    @property
    def nbytes(self) -> int:
        return int(self.mat.nbytes)

    def upsert(self, ids: Sequence[str], kinds: np.ndarray, vecs: np.ndarray) -> None:
        """Add rows, or replace the vector of rows already here (their text changed)."""
        new = [k for k, i in enumerate(ids) if i not in self.pos]
        for k, i in enumerate(ids):
            p = self.pos.get(i)
            if p is not None:
                self.mat[p] = vecs[k]
                self.kind[p] = kinds[k]
                self.alive[p] = True
        if not new:
            return
        need = self.size + len(new)
        if need > len(self.mat):
            # Grow geometrically; readers holding the old array keep a valid (older) view.
            cap = max(need, int(len(self.mat) * 1.5) + 64)
            mat = np.zeros((cap, self.dim), dtype=np.float32)
            mat[: self.size] = self.mat[: self.size]
            kind = np.zeros(cap, dtype=np.int8)
            kind[: self.size] = self.kind[: self.size]
            alive = np.zeros(cap, dtype=bool)
            alive[: self.size] = self.alive[: self.size]
            self.mat, self.kind, self.alive = mat, kind, alive
        sel = np.asarray(new)
        self.mat[self.size:need] = vecs[sel]
        self.kind[self.size:need] = kinds[sel]
        self.alive[self.size:need] = True
        for k in new:
            self.pos[ids[k]] = len(self.ids)
            self.ids.append(ids[k])
        self.size = need

    def drop(self, ids: Sequence[str]) -> None:
        for i in ids:
            p = self.pos.get(i)
            if p is not None:
                self.alive[p] = False


@dataclass(frozen=True)
class Proposal:
    """The best rows before the table has checked them (see `VectorCache.propose`)."""

    ranked: list[tuple[str, float]]     # (id, cosine), best first
    unchecked: frozenset[str]           # rows from memory: the caller checks them in SQL
    floor: float                        # the lowest cosine proposed from memory
    complete: bool                      # memory held no other candidate row
    vectors: dict[str, np.ndarray]


class VectorCache:
    """In-process vector matrices of one store's large spaces (see the module docstring).

    Thread-safe: keeping the matrices current happens under a lock on a fresh cursor, so each
    update sees a later snapshot than the one before; the scoring works on arrays that are only
    ever appended to or replaced.
    """

    def __init__(self, store: Store, *, min_rows: int = CACHE_MIN_ROWS, max_bytes: int = CACHE_MAX_BYTES) -> None:
        self._store = store
        self.min_rows = min_rows
        self.max_bytes = max_bytes
        # Rows proposed beyond n: room for rows retired behind the cache's back (the checked
        # search drops those it finds, so they rarely come back).
        self.margin = 10
        self._lock = threading.Lock()
        self._spaces: OrderedDict[str, _Space] = OrderedDict()  # LRU order
        self._sizes: dict[str, int] = {}    # live rows with a vector per space (an estimate)
        self._kinds: dict[str, int] = {}
        self._synced = -1                   # highest seq applied; -1 = not started
        self._model: str | None = None
        self._dim = 0
        self._too_big: set[str] = set()

    # --- public ---------------------------------------------------------------------------
    def candidates(self, con: Conn, qvec: np.ndarray, space_ids: Sequence[str], n: int,
                   kinds: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """Top `n` (id, cosine) among active memories of the allowed spaces: the same rows as
        `vector_candidates(con, ...)`, with large spaces scored in memory."""
        return self.search(con, qvec, space_ids, n, kinds)[0]

    def search(self, con: Conn, qvec: np.ndarray, space_ids: Sequence[str], n: int,
               kinds: Sequence[str] | None = None) -> tuple[list[tuple[str, float]], dict[str, np.ndarray]]:
        """`candidates`, plus the vectors of the returned rows that came from memory."""
        space_ids = list(dict.fromkeys(space_ids))
        if not space_ids or n <= 0:
            return [], {}
        qvec = np.asarray(qvec, dtype=np.float32)
        cached = self._prepare(space_ids, len(qvec))
        small = [s for s in space_ids if s not in cached]
        found: list[tuple[str, float]] = []
        vecs: dict[str, np.ndarray] = {}
        if cached:
            found, vecs = self._search_cached(con, qvec, cached, n, kinds)
        if small:
            found += vector_candidates(con, qvec, small, n, kinds)
            found.sort(key=lambda x: (-x[1], x[0]))
            found = found[:n]
        keep = {i for i, _ in found}
        return found, {i: v for i, v in vecs.items() if i in keep}

    def propose(self, con: Conn, qvec: np.ndarray, space_ids: Sequence[str], n: int,
                kinds: Sequence[str] | None = None) -> Proposal:
        """The best `n` rows plus a margin, rows from memory unchecked. Recall checks them with
        the same query that fetches its rows (one lookup instead of two), then calls `settle`."""
        space_ids = list(dict.fromkeys(space_ids))
        if not space_ids or n <= 0:
            return Proposal([], frozenset(), -np.inf, True, {})
        qvec = np.asarray(qvec, dtype=np.float32)
        cached = self._prepare(space_ids, len(qvec))
        small = [s for s in space_ids if s not in cached]
        ranked: list[tuple[str, float]] = []
        vecs: dict[str, np.ndarray] = {}
        floor, complete = -np.inf, True
        if cached:
            parts, total = self._score(qvec, cached, kinds)
            m = min(total, n + self.margin)
            top = self._top(parts, m)
            ranked = [(i, sim) for i, sim, _, _ in top]
            vecs = {i: mat[p] for i, _, mat, p in top}
            complete = m >= total
            floor = top[-1][1] if top else -np.inf
        unchecked = frozenset(i for i, _ in ranked)
        if small:
            ranked += vector_candidates(con, qvec, small, n, kinds)
            ranked.sort(key=lambda x: (-x[1], x[0]))
        return Proposal(ranked, unchecked, floor, complete, vecs)

    def settle(self, con: Conn, proposal: Proposal, live: set[str], qvec: np.ndarray, space_ids: Sequence[str],
               n: int, kinds: Sequence[str] | None = None) -> tuple[list[tuple[str, float]], dict[str, np.ndarray]]:
        """The exact top `n`, given which unchecked rows the table found live (active, in an
        allowed space, of an allowed kind). When too few were, runs the checked search."""
        kept = [(i, s) for i, s in proposal.ranked if i not in proposal.unchecked or i in live]
        # Rows not proposed from memory score at most `floor`: n live rows at or above it are
        # the answer.
        if proposal.complete or sum(1 for _, s in kept if s >= proposal.floor) >= n:
            kept = kept[:n]
            return kept, {i: proposal.vectors[i] for i, _ in kept if i in proposal.vectors}
        return self.search(con, qvec, space_ids, n, kinds)

    def vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Vectors of `ids` held in memory (rows of uncached spaces are simply absent)."""
        out: dict[str, np.ndarray] = {}
        with self._lock:
            spaces = list(self._spaces.values())
        for i in ids:
            for sp in spaces:
                p = sp.pos.get(i)
                if p is not None:
                    out[i] = sp.mat[p]
                    break
        return out

    def clear(self) -> None:
        with self._lock:
            self._reset()

    # --- keeping current ------------------------------------------------------------------
    def _reset(self) -> None:
        self._spaces.clear()
        self._sizes.clear()
        self._too_big.clear()
        self._synced = -1

    def _prepare(self, space_ids: list[str], dim: int) -> dict[str, _Space]:
        """Catch up with the table, load requested large spaces; returns the cached ones."""
        with self._lock:
            self._store.read(lambda c: self._catch_up(c, space_ids, dim))
            out: dict[str, _Space] = {}
            for s in space_ids:
                sp = self._spaces.get(s)
                if sp is not None:
                    self._spaces.move_to_end(s)
                    out[s] = sp
            return out

    def _catch_up(self, con: Conn, space_ids: list[str], dim: int) -> None:
        row = con.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
        model = row[0] if row else None
        if self._synced >= 0 and (model != self._model or dim != self._dim):
            log.info("embedding model or dimension changed: vector cache emptied")
            self._reset()
        self._model, self._dim = model, dim
        if self._synced < 0:
            if self.min_rows > 0:
                # Rows per space decide which spaces to hold. No `embedding IS NOT NULL` here:
                # it makes DuckDB decompress every vector (~90 ms at 130k rows, against ~1 ms).
                rows = con.execute("SELECT space_id, count(*) FROM memories WHERE status = 'active' GROUP BY 1").fetchall()
                self._sizes = {s: int(c) for s, c in rows}
            self._synced = int(con.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0])
        else:
            self._apply_new_rows(con)
        for s in space_ids:
            if s not in self._spaces and s not in self._too_big and self._sizes.get(s, 0) >= self.min_rows:
                self._load(con, s)

    def _apply_new_rows(self, con: Conn) -> None:
        # NULL vectors come back masked; only live rows' vectors are read.
        got = con.execute(
            "SELECT id, space_id, kind, seq, status = 'active' AND embedding IS NOT NULL AS live, embedding "
            f"FROM memories WHERE seq > {int(self._synced)}"
        ).fetchnumpy()
        if len(got["id"]) == 0:
            return
        self._synced = max(self._synced, int(got["seq"].max()))
        by_space: dict[str, list[int]] = {}
        for k, s in enumerate(got["space_id"]):
            by_space.setdefault(s, []).append(k)
        for s, rows in by_space.items():
            live = [k for k in rows if got["live"][k] and len(got["embedding"][k]) == self._dim]
            sp = self._spaces.get(s)
            if sp is None:
                self._sizes[s] = self._sizes.get(s, 0) + len(live)
                continue
            live_set = set(live)
            sp.drop([got["id"][k] for k in rows if k not in live_set])
            if live:
                sp.upsert([got["id"][k] for k in live],
                          np.array([self._kind_code(got["kind"][k]) for k in live], dtype=np.int8),
                          np.stack([np.asarray(got["embedding"][k], dtype=np.float32) for k in live]))
            self._sizes[s] = sp.size

    def _load(self, con: Conn, space: str) -> None:
        got = con.execute(
            "SELECT id, kind, embedding FROM memories WHERE space_id = ? AND status = 'active' AND embedding IS NOT NULL",
            [space],
        ).fetchnumpy()
        n = len(got["id"])
        if n * self._dim * 4 > self.max_bytes:
            self._too_big.add(space)
            log.info("space %s has %d vectors, more than the vector cache holds: searched in SQL", space, n)
            return
        while self._spaces and sum(sp.nbytes for sp in self._spaces.values()) + n * self._dim * 4 > self.max_bytes:
            old, _ = self._spaces.popitem(last=False)
            log.info("vector cache full: dropped space %s", old)
        sp = _Space(self._dim)
        if n:
            sp.upsert(list(got["id"]), np.array([self._kind_code(k) for k in got["kind"]], dtype=np.int8),
                      np.stack(got["embedding"]).astype(np.float32, copy=False))
        self._spaces[space] = sp
        self._sizes[space] = sp.size
        log.info("vector cache: loaded %d vectors of space %s", n, space)

    def _kind_code(self, kind: str) -> int:
        code = self._kinds.get(kind)
        if code is None:
            code = self._kinds[kind] = len(self._kinds) + 1
        return code

    # --- scoring --------------------------------------------------------------------------
    def _score(self, qvec: np.ndarray, spaces: dict[str, _Space], kinds: Sequence[str] | None) -> tuple[list, int]:
        """Cosine of every live row of the cached spaces (-inf for rows not wanted)."""
        parts = []
        for s, sp in spaces.items():
            size = sp.size
            mat, alive, kind, ids = sp.mat[:size], sp.alive[:size], sp.kind[:size], sp.ids
            ok = alive.copy()
            if kinds:
                ok &= np.isin(kind, [self._kinds.get(k, -1) for k in kinds])
            sims = mat @ qvec
            sims[~ok] = -np.inf
            parts.append((s, sp, ids, mat, sims, int(ok.sum())))
        return parts, sum(p[5] for p in parts)

    def _search_cached(self, con: Conn, qvec: np.ndarray, spaces: dict[str, _Space], n: int,
                       kinds: Sequence[str] | None) -> tuple[list[tuple[str, float]], dict[str, np.ndarray]]:
        parts, total = self._score(qvec, spaces, kinds)
        m = min(total, n + self.margin)
        allowed = list(spaces)
        while True:
            top = self._top(parts, m)
            live, dead = self._check(con, [i for i, _, _, _ in top], allowed, kinds)
            if dead:
                with self._lock:
                    for _, sp, *_ in parts:
                        sp.drop(dead)
            found = [(i, sim, sp_mat, p) for i, sim, sp_mat, p in top if i in live]
            if len(found) >= n or m >= total:
                found = found[:n]
                return [(i, float(sim)) for i, sim, _, _ in found], {i: mat[p] for i, _, mat, p in found}
            m = min(total, m * 4)

    @staticmethod
    def _top(parts: list, m: int) -> list[tuple[str, float, np.ndarray, int]]:
        """The `m` best rows over all cached spaces, best first: (id, sim, matrix, row)."""
        cands = []
        for _, _, ids, mat, sims, count in parts:
            k = min(m, count)
            if k <= 0:
                continue
            idx = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.arange(len(sims))
            cands.extend((ids[j], float(sims[j]), mat, int(j)) for j in idx if sims[j] != -np.inf)
        cands.sort(key=lambda c: (-c[1], c[0]))
        return cands[:m]

    @staticmethod
    def _check(con: Conn, ids: list[str], spaces: list[str], kinds: Sequence[str] | None) -> tuple[set[str], list[str]]:
        """The table has the last word: ids that are live in an allowed space, and ids found
        inactive or gone (to drop from memory)."""
        if not ids:
            return set(), []
        # No `embedding IS NOT NULL` here: it would read the compressed vectors (~2 ms more), and
        # vectors only become NULL when reembed changes the dimension, which empties the cache.
        rows = con.execute(
            f"SELECT id, space_id, kind, status FROM memories WHERE id IN ({_in_list(ids)})"
        ).fetchall()
        allowed, kinds_ok = set(spaces), set(kinds) if kinds else None
        live = {i for i, s, k, st in rows if st == "active" and s in allowed and (kinds_ok is None or k in kinds_ok)}
        # A row the table does not have was deleted: recall reads on autocommit cursors, whose
        # every query sees all commits, so none is merely newer than the caller's snapshot.
        status = {i: st for i, _, _, st in rows}
        dead = [i for i in ids if status.get(i) != "active"]
        return live, dead


# The vector cache of a store (one per Store object, made on first use).
cache_for: PerStore[VectorCache] = PerStore(VectorCache)
