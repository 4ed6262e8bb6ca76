"""A space's vector file built in the background (issue 33), not on the space's first question.

Reading a 10k-row space's vectors from the table took 0.4-0.5 s (3 s at 100k): DuckDB hands each
FLOAT[384] over as an object of its own. The first search of a space with no file therefore no
longer reads them; it is answered by the exact SQL scan (vectors.vector_candidates, tens of ms)
and asks for the file here. A writer of many rows at once (a document, an import) asks too, so
the file is there before the first question. One thread builds the files asked for, one at a
time, and ends when none is left.

A file is only ever a cache (vector_files.py): it is written beside its final name and renamed
over it only if no forget, refile or model change touched the space meanwhile (`forget` bumps a
generation the build checks under the cache's lock), so a forgotten row's vector never comes
back on disk through a build that started before the forget.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from memory.store import vector_files
from memory.store.connection import Store
from memory.store.vector_space import SpaceVectors

log = logging.getLogger(__name__)


class Warmer:
    """Builds the vector files of the spaces asked for, in a background thread."""

    def __init__(self, store: Store, folder: Path, min_rows: int, lock: threading.Lock,
                 held: Callable[[str], bool]) -> None:
        self._store = store
        self._folder = folder
        self.min_rows = min_rows
        self._lock = lock                  # the cache's lock: a file is installed under it
        self._held = held                  # whether the cache holds a space (it writes that file itself)
        self._mine = threading.Lock()
        self._wanted: dict[str, int] = {}  # space -> its generation when asked, in order
        self._generation: dict[str, int] = {}
        self._epoch = 0                    # bumped by forget(None): every space
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._stopped = False
        # A build still reading when the process ends aborted it ("terminate called without an
        # active exception", exit -6, after `memgate memory import` asked for its spaces' files):
        # the store's close waits for the build in hand and no other starts.
        before_close = getattr(store, "before_close", None)
        if before_close is not None:
            before_close(self.stop)

    def want(self, spaces: Iterable[str]) -> None:
        """Build the files of `spaces` that have none (and enough rows), in the background."""
        with self._mine:
            if self._stopped:
                return
            for s in spaces:
                if s not in self._wanted:
                    self._wanted[s] = self._gen(s)
            if not self._wanted or (self._thread is not None and self._thread.is_alive()):
                return
            self._idle.clear()
            self._thread = threading.Thread(target=self._run, name="memgate-vector-files", daemon=True)
            self._thread.start()

    def forget(self, spaces: Iterable[str] | None = None) -> None:
        """A file being built for `spaces` (None: any) is not installed: their rows changed in a
        way a build that read them earlier would miss (a forget, a new embedding model)."""
        with self._mine:
            if spaces is None:
                self._epoch += 1
                self._wanted.clear()
                return
            for s in spaces:
                self._generation[s] = self._generation.get(s, 0) + 1
                self._wanted.pop(s, None)

    def stop(self) -> None:
        """No build starts from now on; the one in hand is finished (its file is only a cache)."""
        with self._mine:
            self._stopped = True
            self._wanted.clear()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no build is left (benches, tests); False on timeout."""
        return self._idle.wait(timeout)

    def _gen(self, space: str) -> int:
        return self._epoch * 1_000_003 + self._generation.get(space, 0)

    def _run(self) -> None:
        while True:
            with self._mine:
                if not self._wanted:
                    self._idle.set()
                    return
                space = next(iter(self._wanted))
                generation = self._wanted.pop(space)
            try:
                self._build(space, generation)
            except Exception:  # a cache: the space is searched in SQL and asked for again later
                log.warning("building the vector file of space %s failed", space, exc_info=True)

    def _build(self, space: str, generation: int) -> None:
        path = vector_files.path_for(self._folder, space)
        if path.exists() or self._held(space):
            return

        def read(con):
            # A space too small for a file (most first writes) costs a count, not its vectors.
            if con.execute("SELECT count(*) FROM memories WHERE space_id = ? AND status = 'active'",
                           [space]).fetchone()[0] < self.min_rows:
                return None, None
            model = con.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
            # One statement, one snapshot: the rows and the highest seq they are complete up to.
            got = con.execute(
                "SELECT id, kind, seq, embedding, (SELECT coalesce(max(seq), 0) FROM memories) AS top FROM memories "
                "WHERE space_id = ? AND status = 'active' AND embedding IS NOT NULL", [space]).fetchnumpy()
            return (model[0] if model else None), got

        model, got = self._store.read(read)
        n = len(got["id"]) if got is not None else 0
        if n < self.min_rows:
            return
        kinds = sorted(set(got["kind"].tolist()))
        code = {k: i for i, k in enumerate(kinds, start=1)}
        sp = SpaceVectors(self._store.dim)
        sp.upsert(list(got["id"]), np.array([code[k] for k in got["kind"]], dtype=np.int8),
                  np.asarray(got["seq"], dtype=np.int64), np.stack(got["embedding"]).astype(np.float32, copy=False))
        sp.synced = int(got["top"][0])
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        staged = path.with_name(f"{path.name}.{os.getpid()}.staged")
        try:
            vector_files.save(sp, staged, space, model, kinds)
            with self._lock, self._mine:
                if self._gen(space) == generation and not path.exists() and not self._held(space):
                    os.replace(staged, path)
                    log.info("vector file of space %s built in the background (%d vectors)", space, n)
        finally:
            staged.unlink(missing_ok=True)
