"""Vector candidates: the top-n memories of the allowed spaces by cosine similarity.

Embeddings are unit vectors, so cosine is the inner product. Two paths return the same rows:

- `vector_candidates(con, ...)`: exact, in SQL, on any connection (also inside a write
  transaction). DuckDB reads the vectors of every row group holding a row of the allowed spaces
  and decompresses them (floats are stored ALP-compressed): in a 130k-row table ~2 ms for a
  1k-row space, ~28 ms for 10k, ~100 ms for 100k. The space filter is in the SQL (DuckDB's
  HNSW index filters after its top-k and returns too few rows for a small space, so per-space
  search does not depend on it).
- `VectorCache`: the vectors of the spaces recall searches are held in this process as int8
  codes scanned first and float32 vectors that re-rank the best exactly (vector_space.py:
  ~3.5 ms for 100k x 384 on one core). A DuckDB file store keeps each space's vectors in a
  file beside the database (`<db>.vectors/`, mode 0600), so the first search of a space after
  a restart maps the file and reads only the rows changed since it was written, instead of
  every vector of the space from the table; a large space that has no file yet is searched in
  SQL while its file is built in the background (vector_warm.py), and a writer of many rows
  asks for the file at once (`warm`). Memory only proposes: the best
  rows are checked against the table in SQL on the caller's connection (the row exists, is
  active, is in an allowed space, is of an allowed kind) and the slice widens until `n` rows
  pass, so the answer is the SQL path's. Recall checks the proposal with the query that
  fetches its rows anyway (`propose` / `settle`), so the check costs no extra round trip.

Keeping the matrices current: every search first reads the rows whose `seq` is above the
highest one the cache has seen (`seq` grows on every insert and text change, so DuckDB's zone
maps skip the old row groups). A row that a check finds inactive or gone is dropped from its
matrix; rows never return to 'active' without a new `seq` (memory_forget, supersede and archive
are one-way), and a new `seq` re-adds them. A change of embedding model or dimension (reembed)
empties the cache and deletes the files. A file whose sampled rows the table does not have at
those seqs (a restored backup, another database's folder) is discarded and rebuilt.

Why one module of ~500 lines: the cache's parts (catch-up by seq, the files, scoring, the
check against the table) all keep one invariant, that every matrix holds exactly the active
rows up to the cache's watermark; split apart, each part would need the others' bookkeeping.
What has no share in it is elsewhere: the file format in vector_files.py, the int8 scan and
re-rank in vector_space.py.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memory.store.connection import Conn, PerStore, Store, vector_literal
from memory.store.dialect import dialect_of
from memory.store import vector_files
from memory.store.postings_cache import GENERATION_KEY, WATERMARK_KEY
from memory.store.vector_space import SpaceVectors, over, quantize
from memory.store.vector_warm import Warmer

log = logging.getLogger(__name__)

# Every space recall searches is held (a 1k-row space costs 1.5 MB): from a few thousand rows
# up, the SQL scan is the slowest part of recall, and memory lets recall check the proposal in
# the row fetch it does anyway. Above CACHE_MAX_BYTES the least recently searched spaces go.
CACHE_MIN_ROWS = 0
CACHE_MAX_BYTES = 1 << 30     # ~700k vectors of 384 floats across all cached spaces
# Spaces this large get a file: below it, reading the vectors from the table at the first
# search costs a few ms (a file would only add writes, and copies of vectors on disk).
PERSIST_MIN_ROWS = 2000
# The meta keys read with every catch-up: the embedding model, and what recall's keyword side
# would otherwise ask in a query of its own (the postings' version: postings_cache.py).
WATCHED = ("embedding_model", WATERMARK_KEY, GENERATION_KEY)
# A space this large with no file is not read from the table on a question (0.4 s at 10k rows):
# it is searched in SQL while its file is built in the background (vector_warm.py).
COLD_MIN_ROWS = 2000


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


@dataclass(frozen=True)
class Proposal:
    """The best rows before the table has checked them (see `VectorCache.propose`)."""

    ranked: list[tuple[str, float]]     # (id, cosine), best first
    unchecked: frozenset[str]           # rows from memory: the caller checks them in SQL
    floor: float                        # the lowest cosine proposed from memory
    complete: bool                      # memory held no other candidate row
    vectors: dict[str, np.ndarray]
    seqs: dict[str, int] = field(default_factory=dict)  # the row versions memory scored
    # The `WATCHED` meta keys, read with the rows changed since the last search (one round trip
    # where recall asked for the keyword index's version in a query of its own).
    meta: dict[str, str] | None = None


class VectorCache:
    """In-process vectors of the spaces recall searches (see the module docstring).

    Thread-safe: keeping the matrices current happens under a lock on a fresh cursor, so each
    update sees a later snapshot than the one before; the scoring works on arrays that are only
    ever appended to or replaced.
    """

    def __init__(self, store: Store, *, min_rows: int = CACHE_MIN_ROWS, max_bytes: int = CACHE_MAX_BYTES,
                 folder: Path | None | bool = True, persist_min_rows: int = PERSIST_MIN_ROWS,
                 cold_min_rows: int = COLD_MIN_ROWS) -> None:
        self._store = store
        self.min_rows = min_rows
        self.max_bytes = max_bytes
        self.persist_min_rows = persist_min_rows
        self.cold_min_rows = max(cold_min_rows, persist_min_rows)  # a space built in the background gets a file
        # Rows proposed beyond n: room for rows retired behind the cache's back (the checked
        # search drops those it finds, so they rarely come back).
        self.margin = 10
        self.folder: Path | None = vector_files.cache_folder(store) if folder is True else (folder or None)
        self._lock = threading.Lock()
        self._spaces: OrderedDict[str, SpaceVectors] = OrderedDict()  # LRU order
        self._sizes: dict[str, int] = {}    # live rows with a vector per space (an estimate)
        self._kinds: dict[str, int] = {}
        self._synced = -1                   # highest seq applied; -1 = not started
        self._model: str | None = None
        self._dim = 0
        self._too_big: set[str] = set()
        self._written: dict[str, int] = {}  # rows written to a space not held since its file was asked for
        # Files of spaces too big to read from the table on a question, built in the background.
        self._warmer = (Warmer(store, self.folder, persist_min_rows, self._lock, lambda s: s in self._spaces)
                        if self.folder is not None else None)

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
        meta: dict[str, str] = {}
        cached = self._prepare(space_ids, len(qvec), meta)
        small = [s for s in space_ids if s not in cached]
        ranked: list[tuple[str, float]] = []
        vecs: dict[str, np.ndarray] = {}
        floor, complete = -np.inf, True
        if cached:
            scored = self._score(qvec, cached, kinds)
            m = min(scored.total, n + self.margin)
            top = scored.top(m)
            ranked = [(i, sim) for i, sim, _, _ in top]
            vecs = {i: v for i, _, v, _ in top}
            seqs = {i: q for i, _, _, q in top}
            complete = m >= scored.total
            floor = top[-1][1] if top else -np.inf
        else:
            seqs = {}
        unchecked = frozenset(i for i, _ in ranked)
        if small:
            ranked += vector_candidates(con, qvec, small, n, kinds)
            ranked.sort(key=lambda x: (-x[1], x[0]))
        return Proposal(ranked, unchecked, floor, complete, vecs, seqs, meta)

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
        with self._lock:
            spaces = list(self._spaces.values())
        out: dict[str, np.ndarray] = {}
        for sp in spaces:
            hits = [(i, p) for i, p in ((i, sp.pos.get(i)) for i in ids if i not in out) if p is not None]
            if hits:
                got = sp.vectors(np.array([p for _, p in hits]))
                out.update((i, got[k]) for k, (i, _) in enumerate(hits))
        return out

    def ids_of(self, seqs: Sequence[int]) -> dict[int, str]:
        """The ids of these row versions, for those held in memory (a seq names one version of
        one row, so the answer never goes stale: a row found gone is still checked in SQL)."""
        with self._lock:
            spaces = list(self._spaces.values())
        out: dict[int, str] = {}
        for sp in spaces:
            out.update((q, i) for q, i in ((q, sp.by_seq.get(q)) for q in seqs if q not in out) if i is not None)
        return out

    def clear(self) -> None:
        """Forget every held vector (a new embedding model); the files go too."""
        with self._lock:
            self._reset(delete_files=True)

    def warm(self, spaces: Sequence[str]) -> None:
        """Many rows were just written to `spaces` (a document, an import): build the file of each
        space large enough for one, in the background, before its first question."""
        if self._warmer is not None:
            self._warmer.want(s for s in spaces if s not in self._spaces)

    def written(self, spaces: Sequence[str], rows: int = 1) -> None:
        """`rows` rows were just written to `spaces` (the ingest of a turn): a space this process
        neither holds nor has asked about gets its file built in the background, so the first
        question after a restart maps it instead of reading every vector from the table (0.5 s at
        10k rows). Asked again every `persist_min_rows // 2` rows written while not held: a space
        too small for a file at its first write may have grown into one."""
        if self._warmer is None:
            return
        with self._lock:
            ask = []
            for s in dict.fromkeys(spaces):
                if s in self._spaces:
                    continue
                since = self._written.get(s)
                if since is None or since + rows >= self.persist_min_rows // 2:
                    self._written[s] = 0
                    ask.append(s)
                else:
                    self._written[s] = since + rows
        if ask:
            self._warmer.want(ask)

    def settled(self, timeout: float | None = None) -> bool:
        """Wait until the files asked for are built (benches, tests); False on timeout."""
        return self._warmer.wait(timeout) if self._warmer is not None else True

    def refile(self, spaces: Sequence[str], *, drop: bool = False) -> None:
        """Rewrite the files of `spaces` with their live rows only, or remove them (a space not
        held, too small for a file, or `drop`: an erased space), so no forgotten row's vector
        stays on disk. A removed file is rebuilt from the table at the space's next search.
        The spaces' rows held for recall (row_cache.py) go too: their text is not kept either."""
        from memory.store.row_cache import rows_for

        rows_for(self._store).drop_spaces(spaces)
        with self._lock:
            if self._warmer is not None:
                self._warmer.forget(spaces)  # a file being built from rows read before this is not kept
            for s in spaces:
                sp = self._spaces.get(s)
                if drop and sp is not None:
                    self._spaces.pop(s).close()
                    self._sizes.pop(s, None)
                    sp = None
                path = self._file(s)
                if path is None:
                    continue
                if sp is not None and sp.live >= self.persist_min_rows:
                    self._spaces[s] = self._save(s, sp)
                else:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        """Flush rows zeroed in the mapped files."""
        with self._lock:
            for sp in self._spaces.values():
                sp.close()

    # --- keeping current ------------------------------------------------------------------
    def _reset(self, delete_files: bool = False) -> None:
        if delete_files and self._warmer is not None:
            self._warmer.forget()
        for sp in self._spaces.values():
            sp.close()
        self._spaces.clear()
        self._sizes.clear()
        self._too_big.clear()
        self._synced = -1
        if delete_files and self.folder is not None and self.folder.is_dir():
            for f in self.folder.glob("*.vec"):
                f.unlink(missing_ok=True)

    def _prepare(self, space_ids: list[str], dim: int, meta: dict[str, str] | None = None) -> dict[str, SpaceVectors]:
        """Catch up with the table, load requested spaces; returns the cached ones (and fills
        `meta` with the `WATCHED` keys read on the way)."""
        with self._lock:
            self._store.read(lambda c: self._catch_up(c, space_ids, dim, meta))
            out: dict[str, SpaceVectors] = {}
            for s in space_ids:
                sp = self._spaces.get(s)
                if sp is not None:
                    self._spaces.move_to_end(s)
                    out[s] = sp
            return out

    def _catch_up(self, con: Conn, space_ids: list[str], dim: int, meta: dict[str, str] | None = None) -> None:
        watched, got = self._changes(con, dim)
        if meta is not None:
            meta.update(watched)
        model = watched.get("embedding_model")
        if self._synced >= 0 and (model != self._model or dim != self._dim):
            log.info("embedding model or dimension changed: vector cache emptied")
            self._reset(delete_files=True)
        self._model, self._dim = model, dim
        if self._synced < 0:
            if self.min_rows > 0:
                # Rows per space decide which spaces to hold. No `embedding IS NOT NULL` here:
                # it makes DuckDB decompress every vector (~90 ms at 130k rows, against ~1 ms).
                counts = con.execute("SELECT space_id, count(*) FROM memories WHERE status = 'active' GROUP BY 1").fetchall()
                self._sizes = {s: int(c) for s, c in counts}
            self._synced = int(con.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0])
        elif got is not None and len(got["id"]):
            self._apply(got, np.arange(len(got["id"])))
        for s in space_ids:
            if s not in self._spaces and s not in self._too_big and self._sizes.get(s, 0) >= self.min_rows:
                self._load(con, s)

    def _changes(self, con: Conn, dim: int) -> tuple[dict[str, str], dict | None]:
        """The `WATCHED` meta keys (the embedding model: a reembed rewrites every vector without a
        new seq) and the rows changed since the last search (None before the first). NULL
        vectors come back masked. DuckDB: one round trip (the meta rows unioned onto the changed
        rows)."""
        changed = ("SELECT id, space_id, kind, seq, status = 'active' AND embedding IS NOT NULL AS live, embedding "
                   f"FROM memories WHERE seq > {int(self._synced)}")
        keys = ", ".join(f"'{k}'" for k in WATCHED)
        if self._synced < 0 or dialect_of(con).postgres:
            meta = dict(con.execute(f"SELECT key, value FROM meta WHERE key IN ({keys})").fetchall())
            return meta, (con.execute(changed).fetchnumpy() if self._synced >= 0 else None)
        got = con.execute(
            f"SELECT 0 AS part, value AS model, key AS id, NULL AS space_id, NULL AS kind, NULL::BIGINT AS seq, "
            f"NULL::BOOLEAN AS live, NULL::FLOAT[{dim}] AS embedding FROM meta WHERE key IN ({keys}) "
            f"UNION ALL SELECT 1, NULL, * FROM ({changed})"
        ).fetchnumpy()
        head = np.asarray(got["part"]) == 0
        meta = {got["id"][k]: got["model"][k] for k in np.flatnonzero(head).tolist()}
        rows = np.flatnonzero(~head)
        return meta, {k: got[k][rows] for k in ("id", "space_id", "kind", "seq", "live", "embedding")}

    def _apply(self, got: dict, rows: np.ndarray, only: str | None = None) -> None:
        """Apply changed rows (from `fetchnumpy`) to the spaces held (all, or `only`)."""
        seqs = np.asarray(got["seq"])[rows].astype(np.int64)
        if only is None:
            self._synced = max(self._synced, int(seqs.max()))
        by_space: dict[str, list[int]] = {}
        for k in rows.tolist():
            by_space.setdefault(got["space_id"][k], []).append(k)
        for s, ks in by_space.items():
            if only is not None and s != only:
                continue
            live = [k for k in ks if got["live"][k] and not np.ma.is_masked(got["embedding"][k])
                    and len(got["embedding"][k]) == self._dim]
            sp = self._spaces.get(s)
            if sp is None:
                self._sizes[s] = self._sizes.get(s, 0) + len(live)
                continue
            live_set = set(live)
            sp.drop([got["id"][k] for k in ks if k not in live_set])
            if live:
                sp.upsert([got["id"][k] for k in live],
                          np.array([self._kind_code(got["kind"][k]) for k in live], dtype=np.int8),
                          np.array([got["seq"][k] for k in live], dtype=np.int64),
                          np.stack([np.asarray(got["embedding"][k], dtype=np.float32) for k in live]))
            sp.synced = max(sp.synced, int(max(got["seq"][k] for k in ks)))
            self._sizes[s] = sp.live
            self._maybe_save(s, sp)

    def _file(self, space: str) -> Path | None:
        return vector_files.path_for(self.folder, space) if self.folder is not None else None

    def _load(self, con: Conn, space: str) -> None:
        """Bring a space into memory: from its file plus the rows changed since, or from SQL."""
        sp = self._from_file(con, space)
        if sp is None and self._warmer is not None:
            # No file: a large space is not read from the table on a question (0.4 s at 10k rows,
            # 3 s at 100k); it is searched in SQL until its file is built in the background.
            n = int(con.execute("SELECT count(*) FROM memories WHERE space_id = ? AND status = 'active'",
                                [space]).fetchone()[0])
            if n >= self.cold_min_rows:
                if n * self._dim * 4 > self.max_bytes:
                    self._too_big.add(space)
                    log.info("space %s has %d vectors, more than the vector cache holds: searched in SQL", space, n)
                else:
                    self._warmer.want([space])
                return
        if sp is None:
            got = con.execute(
                "SELECT id, kind, seq, embedding FROM memories "
                "WHERE space_id = ? AND status = 'active' AND embedding IS NOT NULL",
                [space],
            ).fetchnumpy()
            n = len(got["id"])
            if n * self._dim * 4 > self.max_bytes:
                self._too_big.add(space)
                log.info("space %s has %d vectors, more than the vector cache holds: searched in SQL", space, n)
                return
            sp = SpaceVectors(self._dim)
            sp.synced = self._synced
            if n:
                sp.upsert(list(got["id"]), np.array([self._kind_code(k) for k in got["kind"]], dtype=np.int8),
                          np.asarray(got["seq"], dtype=np.int64), np.stack(got["embedding"]).astype(np.float32, copy=False))
            sp = self._save(space, sp)
        while self._spaces and sum(s.nbytes for s in self._spaces.values()) + sp.nbytes > self.max_bytes:
            old, dropped = self._spaces.popitem(last=False)
            dropped.close()
            log.info("vector cache full: dropped space %s", old)
        self._spaces[space] = sp
        self._sizes[space] = sp.live
        log.info("vector cache: %d vectors of space %s", sp.live, space)

    def _from_file(self, con: Conn, space: str) -> SpaceVectors | None:
        """The space's file, brought up to date, when it belongs to this database and model."""
        path = self._file(space)
        if path is None or not path.exists():
            return None
        got = vector_files.read_header(path)
        sp = vector_files.load(path, self._dim) if got is not None else None
        header = got[0] if got is not None else {}
        if (sp is None or header.get("space") != space or header.get("model") != self._model
                or sp.synced > self._synced or not vector_files.same_rows(con, sp)):
            log.info("vector file of space %s is stale or damaged: reloading from the table", space)
            path.unlink(missing_ok=True)
            return None
        # The file's kind codes by name, as this process numbers them.
        names = header.get("kinds", [])
        remap = np.array([0, *(self._kind_code(k) for k in names)], dtype=np.int8)
        sp.kind = remap[sp.kind[: sp.size].clip(0, len(names))].copy()
        changed = con.execute(
            "SELECT id, space_id, kind, seq, status = 'active' AND embedding IS NOT NULL AS live, embedding "
            f"FROM memories WHERE space_id = ? AND seq > {int(sp.synced)}", [space]).fetchnumpy()
        self._spaces[space] = sp  # _apply updates only spaces held (and may rewrite the file)
        try:
            if len(changed["id"]):
                self._apply(changed, np.arange(len(changed["id"])), only=space)
        finally:
            sp = self._spaces.pop(space)
        sp.synced = max(sp.synced, self._synced)
        return sp

    def _save(self, space: str, sp: SpaceVectors) -> SpaceVectors:
        """The space written to its file and mapped back (or `sp` itself when it gets no file)."""
        path = self._file(space)
        if path is None or sp.live < self.persist_min_rows:
            return sp
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            return vector_files.save(sp, path, space, self._model, self._kind_names())
        except OSError:
            log.warning("could not write the vector file of space %s (searching from memory)", space, exc_info=True)
            return sp

    def _maybe_save(self, space: str, sp: SpaceVectors) -> None:
        """Rewrite a space's file once it holds many rows the file lacks (or many dead ones), so
        a restart loads it without reading the table."""
        if self.folder is None or sp.live < self.persist_min_rows:
            return
        dead = sp.size - sp.live
        if sp.appended > max(1024, sp.nbase // 4) or dead > max(1024, sp.size // 4):
            self._spaces[space] = self._save(space, sp)

    def _kind_names(self) -> list[str]:
        return [k for k, _ in sorted(self._kinds.items(), key=lambda kv: kv[1])]

    def _kind_code(self, kind: str) -> int:
        code = self._kinds.get(kind)
        if code is None:
            code = self._kinds[kind] = len(self._kinds) + 1
        return code

    # --- scoring --------------------------------------------------------------------------
    def _score(self, qvec: np.ndarray, spaces: dict[str, SpaceVectors], kinds: Sequence[str] | None) -> _Scored:
        """Every live row's int8 cosine in the cached spaces (-inf for rows not wanted)."""
        (codes,), (qscale,) = quantize(qvec[None, :])
        wanted_codes = [self._kinds.get(k, -1) for k in kinds] if kinds else None
        parts = []
        for sp in spaces.values():
            wanted = np.isin(sp.kind[: sp.size], wanted_codes) if wanted_codes is not None else None
            sims = sp.exact(qvec, wanted) if sp.small else sp.approx(codes, float(qscale), wanted)
            parts.append((sp, sims, int(np.isfinite(sims).sum())))
        return _Scored(qvec, parts)

    def _search_cached(self, con: Conn, qvec: np.ndarray, spaces: dict[str, SpaceVectors], n: int,
                       kinds: Sequence[str] | None) -> tuple[list[tuple[str, float]], dict[str, np.ndarray]]:
        scored = self._score(qvec, spaces, kinds)
        m = min(scored.total, n + self.margin)
        allowed = list(spaces)
        while True:
            top = scored.top(m)
            live, dead = self._check(con, [i for i, _, _, _ in top], allowed, kinds)
            if dead:
                with self._lock:
                    for sp, _, _ in scored.parts:
                        sp.drop(dead)
            found = [(i, sim, v) for i, sim, v, _ in top if i in live]
            if len(found) >= n or m >= scored.total:
                found = found[:n]
                return [(i, float(sim)) for i, sim, _ in found], {i: v for i, _, v in found}
            m = min(scored.total, m * 4)

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


class _Scored:
    """One query's int8 cosines over the cached spaces; `top(m)` re-ranks the best exactly."""

    def __init__(self, qvec: np.ndarray, parts: list[tuple[SpaceVectors, np.ndarray, int]]) -> None:
        self.qvec, self.parts = qvec, parts
        self.total = sum(p[2] for p in parts)

    def top(self, m: int) -> list[tuple[str, float, np.ndarray, int]]:
        """The `m` best rows by exact float32 cosine, best first: (id, cosine, vector, seq)."""
        cands: list[tuple[str, float, np.ndarray, int]] = []
        for sp, sims, count in self.parts:
            k = min(m if sp.small else over(m), count)
            if k <= 0:
                continue
            idx = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.flatnonzero(np.isfinite(sims))
            idx = idx[np.isfinite(sims[idx])]
            vecs = sp.vectors(idx)
            exact = sims[idx] if sp.small else vecs @ self.qvec  # small: `sims` are exact already
            seqs = sp.seq[idx].tolist()
            cands.extend((sp.ids[j], float(e), vecs[r], seqs[r]) for r, (j, e) in enumerate(zip(idx.tolist(), exact.tolist())))
        cands.sort(key=lambda c: (-c[1], c[0]))
        return cands[:m]


# The vector cache of a store (one per Store object, made on first use).
cache_for: PerStore[VectorCache] = PerStore(VectorCache)
