"""Files only their owner can read: the data folder is 0700 and every file memgate writes is 0600,
whatever umask the process was started with.

Two layers, because not every file is ours to open: `restrict_umask` makes everything this process
creates from then on private (DuckDB's database and WAL, rotated logs, caches, libraries' own
files), and the writers below set 0600 explicitly on the files we open ourselves (so a file that
already existed with a looser mode is tightened when we rewrite it). `loose_paths` lists what an
earlier run, another tool or a copy left readable to other accounts (`memgate doctor` reports it).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600


def restrict_umask() -> int:
    """From now on this process creates files 0600 and folders 0700 (returns the old umask)."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: Path | str) -> Path:
    """Create the folder if needed and make it 0700 (only it: its parents are not ours to change).

    A folder that is shared by design is left as it is: one with the sticky bit (/tmp, /var/tmp)
    or owned by another account. `data_dir = "/tmp"` once turned /tmp into 0700 and every other
    account's programs (a PostgreSQL server among them) lost their files; `memgate doctor` reports
    such a data folder instead."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if not shared_by_design(path):
        _chmod(path, DIR_MODE)
    return path


def shared_by_design(path: Path | str) -> bool:
    """True for a folder other accounts are meant to use: sticky, or not owned by this account."""
    st = Path(path).stat()
    return bool(st.st_mode & stat.S_ISVTX) or st.st_uid != os.geteuid()


def open_private(path: Path | str, mode: str = "w", encoding: str | None = "utf-8") -> IO:
    """Open a file for writing ("w", "a", "wb", "ab"), created 0600 and tightened to 0600 if it was looser."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        _fchmod(fd)
        return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)
    except BaseException:
        os.close(fd)
        raise


def write_private(path: Path | str, data: str | bytes, *, durable: bool = False) -> Path:
    """Replace the file's content atomically (a 0600 temp file renamed over it). `durable` adds an
    fsync, so the new content survives a power cut."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open_private(tmp, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def loose_paths(root: Path | str, extra: Iterable[Path | str] = ()) -> list[tuple[Path, int]]:
    """(path, mode) of `root`, everything under it and `extra` that other accounts may read, write
    or enter (any group or other bit); symbolic links are not followed."""
    found: list[tuple[Path, int]] = []

    def check(p: Path) -> None:
        try:
            st = p.lstat()
        except OSError:
            return
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            found.append((p, stat.S_IMODE(st.st_mode)))

    root = Path(root)
    if root.is_dir():
        check(root)
        for folder, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                check(Path(folder) / name)
    seen = {p for p, _ in found}
    for p in map(Path, extra):
        if p not in seen:
            check(p)
    return found


def tighten(path: Path | str) -> None:
    """Make an existing file of ours 0600."""
    _chmod(Path(path), FILE_MODE)


def _chmod(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except PermissionError:
        pass  # not ours (a folder someone else owns): loose_paths reports it if it is open


def _fchmod(fd: int) -> None:
    try:
        os.fchmod(fd, FILE_MODE)
    except PermissionError:
        pass
