"""One space's vectors as recall scans them: int8 codes for the scan, float32 for the exact re-rank.

A row's int8 code is its vector scaled by 127 / max|x| and rounded; the scan scores every live
row by the codes (simsimd's integer dot product, a quarter of float32's bytes: ~3.5 ms for
100k x 384 on one core, against ~18 ms for numpy's float32 product under the same load), then
the `over(m)` best are scored again exactly in float32 and the best `m` of those returned.

Why the re-rank of a few is enough: a code's rounding moves a cosine by at most
r_x * |q| + |x| * r_q (r = the rounding residual's norm, ~0.007 for E5 vectors), and in
practice far less: measured on 100k E5-built vectors, the int8 cosine is off by 0.0003 (std)
and 0.002 at most, while the 60th and the 240th best cosines lie ~0.01 apart; the exact top 60
never ranked below 72 by code. The re-rank takes 4m + 64 rows.

Persistence: `save` writes the live rows to one file (mode 0600, written beside and renamed
over), `load` maps it back. The float32 part stays memory-mapped (only re-ranked rows are read),
the codes and row data are copied into memory. Rows dropped later (retired, forgotten) are
zeroed in the file at once, so a forgotten memory's vector does not outlive its row on disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import simsimd

MAGIC = b"MGVEC01\n"
_ALIGN = 64


def quantize(vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 codes and scales: x ~= scale * code, code = round(x * 127 / max|x|)."""
    vecs = np.asarray(vecs, dtype=np.float32)
    scale = np.abs(vecs).max(axis=1) / 127.0 if len(vecs) else np.zeros(0, dtype=np.float32)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.rint(vecs / scale[:, None]).clip(-127, 127).astype(np.int8)
    return codes, scale


def over(m: int) -> int:
    """Rows re-ranked in float32 to return the best `m` (see the module docstring)."""
    return 4 * m + 64


def _grown(arr: np.ndarray, cap: int) -> np.ndarray:
    out = np.zeros((cap, *arr.shape[1:]), dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


class SpaceVectors:
    """The rows of one space. Rows [0, size) are live unless `alive` says otherwise; rows
    [0, nbase) have their float32 vector in `base` (a mapped file), the rest in `tail`.

    Readers may score while a writer appends: arrays are only appended to or replaced whole.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        self.by_seq: dict[int, str] = {}     # a row version's id (immutable: a text change makes a new seq)
        self.codes = np.zeros((0, dim), dtype=np.int8)
        self.scale = np.zeros(0, dtype=np.float32)
        self.seq = np.zeros(0, dtype=np.int64)
        self.kind = np.zeros(0, dtype=np.int8)
        self.alive = np.zeros(0, dtype=bool)
        self.base: np.ndarray = np.zeros((0, dim), dtype=np.float32)
        self.tail = np.zeros((0, dim), dtype=np.float32)
        self.nbase = 0
        self.size = 0
        self.synced = 0                     # highest seq applied to this space
        self.appended = 0                   # rows added since the file was written
        self._file_alive: np.ndarray | None = None  # the file's alive flags and codes (mapped, writable)
        self._file_codes: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Memory held outside the mapped file."""
        return int(self.codes.nbytes + self.tail.nbytes + self.scale.nbytes + self.seq.nbytes + self.size * 64)

    @property
    def live(self) -> int:
        return int(self.alive[: self.size].sum())

    # --- changes ------------------------------------------------------------------------------
    def upsert(self, ids: Sequence[str], kinds: np.ndarray, seqs: np.ndarray, vecs: np.ndarray) -> None:
        """Add rows; a row already here with an older seq is replaced (its text changed)."""
        keep = []
        for k, i in enumerate(ids):
            p = self.pos.get(i)
            if p is not None:
                if self.seq[p] >= seqs[k] and self.alive[p]:
                    continue  # already applied (a catch-up may see a row twice)
                self._kill([p])
            keep.append(k)
        if not keep:
            return
        sel = np.asarray(keep)
        vecs = np.asarray(vecs, dtype=np.float32)[sel]
        codes, scale = quantize(vecs)
        n, need = len(keep), self.size + len(keep)
        if need > len(self.codes):
            cap = max(need, int(len(self.codes) * 1.5) + 64)
            # New arrays, then swapped in: a reader holding the old ones keeps a valid view.
            self.codes, self.scale, self.seq = _grown(self.codes, cap), _grown(self.scale, cap), _grown(self.seq, cap)
            self.kind, self.alive = _grown(self.kind, cap), _grown(self.alive, cap)
        if need - self.nbase > len(self.tail):
            self.tail = _grown(self.tail, max(need - self.nbase, int(len(self.tail) * 1.5) + 64))
        lo = self.size
        self.codes[lo:need], self.scale[lo:need] = codes, scale
        self.seq[lo:need] = np.asarray(seqs, dtype=np.int64)[sel]
        self.kind[lo:need] = np.asarray(kinds, dtype=np.int8)[sel]
        self.tail[lo - self.nbase:need - self.nbase] = vecs
        self.alive[lo:need] = True
        for j, k in enumerate(keep):
            self.pos[ids[k]] = lo + j
            self.by_seq[int(self.seq[lo + j])] = ids[k]
        self.ids.extend(ids[k] for k in keep)
        self.size = need
        self.appended += n

    def drop(self, ids: Sequence[str]) -> None:
        """Rows gone or no longer active: never proposed again, and zeroed in the file."""
        self._kill([p for p in (self.pos.get(i) for i in ids) if p is not None])

    def _kill(self, rows: list[int]) -> None:
        rows = [p for p in rows if self.alive[p]]
        if not rows:
            return
        idx = np.asarray(rows)
        self.alive[idx] = False
        self.codes[idx] = 0
        in_file = idx[idx < self.nbase]
        if len(in_file) and self._file_alive is not None and self._file_codes is not None:
            # Both forms of the vector leave the file (a forgotten memory's vector with it).
            self.base[in_file] = 0.0
            self._file_codes[in_file] = 0
            self._file_alive[in_file] = False
            self.close()  # to disk now, not at the kernel's next writeback

    # --- scoring ------------------------------------------------------------------------------
    def approx(self, codes: np.ndarray, qscale: float, wanted: np.ndarray | None) -> np.ndarray:
        """Every row's int8 cosine (-inf for rows not live or not `wanted`)."""
        size = self.size
        if size == 0:
            return np.zeros(0)
        raw = np.asarray(simsimd.cdist(codes[None, :], self.codes[:size], metric="dot", threads=1))[0]
        sims = raw * self.scale[:size] * qscale
        ok = self.alive[:size] if wanted is None else self.alive[:size] & wanted[:size]
        sims[~ok] = -np.inf
        return sims

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The float32 vectors of these rows."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        low = rows < self.nbase
        out[low] = self.base[rows[low]]
        out[~low] = self.tail[rows[~low] - self.nbase]
        return out

    # --- the file -----------------------------------------------------------------------------
    def save(self, path: Path, space: str, model: str | None, kind_names: Sequence[str]) -> None:
        """Write the live rows to `path` (0600, atomically) and map them back as the base."""
        rows = np.flatnonzero(self.alive[: self.size])
        n, dim = len(rows), self.dim
        ids = [self.ids[r] for r in rows]
        width = max((len(i.encode()) for i in ids), default=1)
        header = {"space": space, "model": model, "dim": dim, "n": n, "synced": int(self.synced),
                  "kinds": list(kind_names), "id_width": width}
        vecs = self.vectors(rows)
        parts = {"vecs": vecs, "codes": self.codes[rows], "scale": self.scale[rows], "seq": self.seq[rows],
                 "kind": self.kind[rows], "alive": np.ones(n, dtype=bool),
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
        assert fresh is not None
        self.__dict__.update(fresh.__dict__)

    def close(self) -> None:
        """Flush the zeroed rows of the mapped file."""
        if isinstance(self.base, np.memmap):
            self.base.flush()
        for part in (self._file_alive, self._file_codes):
            if isinstance(part, np.memmap):
                part.flush()


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
    sp._file_alive = mapped("alive", np.bool_, (n,))
    sp._file_codes = mapped("codes", np.int8, (n, dim))
    sp.codes = np.array(sp._file_codes)
    sp.scale = np.array(mapped("scale", np.float32, (n,)))
    sp.seq = np.array(mapped("seq", np.int64, (n,)))
    sp.kind = np.array(mapped("kind", np.int8, (n,)))
    sp.alive = np.array(sp._file_alive)
    sp.ids = [b.decode() for b in np.array(mapped("ids", f"S{width}", (n,))).tolist()]
    sp.pos = {i: k for k, i in enumerate(sp.ids)}
    sp.by_seq = dict(zip(sp.seq.tolist(), sp.ids))
    sp.nbase = sp.size = n
    sp.synced = int(header["synced"])
    return sp
