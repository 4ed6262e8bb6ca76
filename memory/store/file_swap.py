"""Putting a rewritten copy of the DuckDB file in the file's place, safe against a crash at any
point and against another memgate process opening the file meanwhile (memory/store/compact.py
makes the copy; `Store.swap_file` calls `swap` with its connection closed).

The copy holds every committed row (writes were held back while it was made), so the old file's
WAL is superseded by it: it is set aside, not checkpointed (a checkpoint of a large table's
updates can take longer than the copy). The steps, each a rename or an unlink:

    1. `<db>.swap` is written and synced: "the copy is complete, it replaces the file";
    2. the WAL, if any, is renamed to `<db>.wal.superseded`;
    3. the copy `<db>.rewrite` is renamed over `<db>`, and the folder synced;
    4. the superseded WAL and `<db>.swap` are removed.

`finish(path)` runs before every open: with `<db>.swap` present it completes steps 2-4 (the copy
still there) or step 4 (already renamed); without it, a copy left behind was never complete and
is removed, and the old file with its WAL is the database. A failed rename (3) puts the WAL back.

`guard(path)` is the data folder's advisory lock (flock on the folder): shared while a process
opens a database file there, exclusive while a swap runs, so nobody opens the old file in the
moment between the old connection's close and the rename (its writes would go to a file that is
no longer the database).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


def copy_path(path: Path) -> Path:
    """Where the rewritten copy of the file is made."""
    return path.with_name(path.name + ".rewrite")


def wal_of(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".swap")


def _superseded(path: Path) -> Path:
    return path.with_name(path.name + ".wal.superseded")


def _sync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def guard(path: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the data folder's advisory lock (see the module docstring)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no other process is expected to open the file meanwhile
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def swap(path: Path) -> None:
    """Steps 1-4 (the caller holds `guard(exclusive=True)` and has closed its connection without
    a checkpoint). On an error before the rename the file and its WAL are as they were."""
    fresh, wal, aside, marker = copy_path(path), wal_of(path), _superseded(path), _marker(path)
    with open(marker, "w", encoding="utf-8") as f:
        f.write("the rewritten copy replaces the file\n")
        f.flush()
        os.fsync(f.fileno())
    _sync_dir(path)
    moved = False
    try:
        if wal.exists():
            os.replace(wal, aside)
            moved = True
        os.replace(fresh, path)
    except OSError:
        if moved:
            os.replace(aside, wal)
        marker.unlink(missing_ok=True)
        raise
    _sync_dir(path)
    aside.unlink(missing_ok=True)
    marker.unlink(missing_ok=True)


def finish(path: Path) -> None:
    """Before an open: complete a swap a crash interrupted, or drop a copy that never completed."""
    fresh, wal, aside, marker = copy_path(path), wal_of(path), _superseded(path), _marker(path)
    if marker.exists():
        if fresh.exists():
            log.warning("%s: completing the swap of its rewritten copy that a crash interrupted", path.name)
            if wal.exists():
                os.replace(wal, aside)
            os.replace(fresh, path)
            _sync_dir(path)
        aside.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        return
    for leftover in (fresh, wal_of(fresh)):
        if leftover.exists():
            log.warning("removing %s, left by an interrupted rewrite", leftover.name)
            leftover.unlink(missing_ok=True)
