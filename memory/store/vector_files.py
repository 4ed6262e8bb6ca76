"""A space's vectors in a file beside the database, so a restart does not read them from the table.

One file per space (`<db file>.vectors/<sha256 of the space>.vec`, folder 0700, file 0600):
a JSON header (space, model, dimension, rows, the highest seq applied, kind names), then the
float32 vectors, int8 codes, scales, seqs, kind codes, alive flags and ids of the live rows,
each 64-byte aligned. Written whole to a temporary name, fsynced and renamed over; the float32
part is mapped on load, the rest copied into memory. A file is only a cache: the caller checks
it names this database's rows (`same_rows`), model and space before trusting it, and every row
it proposes is still checked in SQL.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory.store.connection import Conn
from memory.store.vector_space import SpaceVectors

MAGIC = b"MGVEC01\n"
_ALIGN = 64


def cache_folder(store: object) -> Path | None:
    """Where a DuckDB file store keeps its vector files (`<db file>.vectors/`); None for an
    in-memory or PostgreSQL store (their vectors are held in memory only)."""
    path = getattr(store, "path", None)
    if getattr(store, "backend", None) != "duckdb" or path is None or str(path) == ":memory:":
        return None
    return Path(path).with_name(Path(path).name + ".vectors")


def path_for(folder: Path, space: str) -> Path:
    """The file of a space (hashed: a space id is any string)."""
    return folder / (hashlib.sha256(space.encode()).hexdigest()[:32] + ".vec")


def same_rows(con: Conn, sp: SpaceVectors) -> bool:
    """Whether the file names rows this database has at those seqs (a restored backup or a
    copied folder does not): a few rows, spread over the file, are compared."""
    live = np.flatnonzero(sp.alive[: sp.size])
    if not len(live):
        return True
    pick = live[np.linspace(0, len(live) - 1, num=min(len(live), 8)).astype(int)]
    want = {sp.ids[p]: int(sp.seq[p]) for p in pick}
    in_list = ", ".join("'" + i.replace("'", "''") + "'" for i in want)
    have = dict(con.execute(f"SELECT id, seq FROM memories WHERE id IN ({in_list})").fetchall())
    # A row rewritten since (newer seq) is fine: the catch-up replaces it.
    return all(i in have and have[i] >= s for i, s in want.items())


def save(sp: SpaceVectors, path: Path, space: str, model: str | None, kind_names: Sequence[str]) -> SpaceVectors:
    """Write the live rows of `sp` to `path` (0600, written beside and renamed over) and return
    them mapped back from the file."""
    rows = np.flatnonzero(sp.alive[: sp.size])
    n, dim = len(rows), sp.dim
    ids = [sp.ids[r] for r in rows]
    width = max((len(i.encode()) for i in ids), default=1)
    header = {"space": space, "model": model, "dim": dim, "n": n, "synced": int(sp.synced),
              "kinds": list(kind_names), "id_width": width}
    vecs = sp.vectors(rows)
    parts = {"vecs": vecs, "codes": sp.codes[rows], "scale": sp.scale[rows], "seq": sp.seq[rows],
             "kind": sp.kind[rows], "alive": np.ones(n, dtype=bool),
             "ids": np.array([i.encode() for i in ids], dtype=f"S{width}")}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            head = json.dumps(header).encode()
            f.write(MAGIC + len(head).to_bytes(4, "little") + head)
            for name, arr in parts.items():
                f.write(b"\0" * (-f.tell() % _ALIGN))
                f.write(np.ascontiguousarray(arr).tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fresh = load(path, dim)
    if fresh is None:
        raise OSError(f"{path} did not read back")
    return fresh


def read_header(path: Path) -> tuple[dict, int] | None:
    """The file's header and where its arrays start; None when it is not one of ours."""
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                return None
            size = int.from_bytes(f.read(4), "little")
            header = json.loads(f.read(size))
            return header, len(MAGIC) + 4 + size
    except (OSError, ValueError):
        return None


def load(path: Path, dim: int) -> SpaceVectors | None:
    """The rows a file holds (float32 part mapped), or None when it is missing, of another
    dimension or cut short."""
    got = read_header(path)
    if got is None:
        return None
    header, off = got
    n, width = int(header["n"]), int(header["id_width"])
    if int(header["dim"]) != dim:
        return None
    layout = [("vecs", np.float32, (n, dim)), ("codes", np.int8, (n, dim)), ("scale", np.float32, (n,)),
              ("seq", np.int64, (n,)), ("kind", np.int8, (n,)), ("alive", np.bool_, (n,)), ("ids", f"S{width}", (n,))]
    offsets = {}
    for name, dtype, shape in layout:
        off += -off % _ALIGN
        offsets[name] = off
        off += int(np.prod(shape)) * np.dtype(dtype).itemsize
    if path.stat().st_size < off:
        return None
    sp = SpaceVectors(dim)
    if n == 0:
        sp.synced = int(header["synced"])
        return sp

    def mapped(name: str, dtype, shape) -> np.ndarray:
        return np.memmap(path, dtype=dtype, mode="r+", offset=offsets[name], shape=shape)

    sp.base = mapped("vecs", np.float32, (n, dim))
    sp.file_alive = mapped("alive", np.bool_, (n,))
    sp.file_codes = mapped("codes", np.int8, (n, dim))
    sp.codes = np.array(sp.file_codes)
    sp.scale = np.array(mapped("scale", np.float32, (n,)))
    sp.seq = np.array(mapped("seq", np.int64, (n,)))
    sp.kind = np.array(mapped("kind", np.int8, (n,)))
    sp.alive = np.array(sp.file_alive)
    sp.ids = [b.decode() for b in np.array(mapped("ids", f"S{width}", (n,))).tolist()]
    sp.pos = {i: k for k, i in enumerate(sp.ids)}
    sp.by_seq = dict(zip(sp.seq.tolist(), sp.ids))
    sp.nbase = sp.size = n
    sp.synced = int(header["synced"])
    return sp
