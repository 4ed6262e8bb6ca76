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

Rows [0, nbase) may come from a file (vector_files.py): their float32 vectors stay mapped (only
re-ranked rows are read), and rows dropped later (retired, forgotten) are zeroed in the file at
once, so a forgotten memory's vector does not outlive its row on disk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import simsimd

def quantize(vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 codes and scales: x ~= scale * code, code = round(x * 127 / max|x|)."""
    vecs = np.asarray(vecs, dtype=np.float32)
    scale = np.abs(vecs).max(axis=1) / 127.0 if len(vecs) else np.zeros(0, dtype=np.float32)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.rint(vecs / scale[:, None]).clip(-127, 127).astype(np.int8)
    return codes, scale


# Spaces held wholly in memory up to this size are scored exactly in float32 at once: the int8
# pass and a re-rank of 4m + 64 rows would cost more than they save.
EXACT_MAX = 4096


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
        self.file_alive: np.ndarray | None = None  # the file's alive flags and codes (mapped, writable)
        self.file_codes: np.ndarray | None = None

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
        if len(in_file) and self.file_alive is not None and self.file_codes is not None:
            # Both forms of the vector leave the file (a forgotten memory's vector with it).
            self.base[in_file] = 0.0
            self.file_codes[in_file] = 0
            self.file_alive[in_file] = False
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

    @property
    def small(self) -> bool:
        """Scored exactly at once (no file part, few rows)."""
        return self.nbase == 0 and self.size <= EXACT_MAX

    def exact(self, qvec: np.ndarray, wanted: np.ndarray | None) -> np.ndarray:
        """Every row's float32 cosine (-inf for rows not live or not `wanted`)."""
        size = self.size
        sims = (self.tail[:size] @ qvec).astype(np.float64)
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

    def close(self) -> None:
        """Flush the zeroed rows of the mapped file."""
        if isinstance(self.base, np.memmap):
            self.base.flush()
        for part in (self.file_alive, self.file_codes):
            if isinstance(part, np.memmap):
                part.flush()
