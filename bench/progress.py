"""What a benchmark shows while it runs, and how it refuses a missing input file.

A benchmark can run for minutes: it shows a progress bar on stderr (tqdm, a dependency) so
the table on stdout stays clean to paste; a data file that is not there is one line naming it
and the README line that says where to get it, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
README = Path(__file__).resolve().parents[1] / "README.md"


def progress(items: Iterable[T], what: str, total: int | None = None) -> Iterator[T]:
    """`items`, with a progress bar on stderr named `what`."""
    from tqdm import tqdm

    yield from tqdm(items, desc=what, total=total, file=sys.stderr, leave=False, mininterval=0.5)


def bar(what: str, total: int):
    """A progress bar on stderr to move by hand (`.update(n)`, `.close()`)."""
    from tqdm import tqdm

    return tqdm(desc=what, total=total, file=sys.stderr, leave=False, mininterval=0.5)


def readme_line(word: str) -> str:
    """The first README line that mentions `word` (case-insensitive), stripped."""
    for line in README.read_text(encoding="utf-8").splitlines():
        if word.lower() in line.lower():
            return line.strip()
    return f"(the README does not say how to get it; search it for {word!r})"


def require_file(path: str | Path, readme_word: str) -> Path:
    """`path` when it is a file; else print why and which README line says how to get it, exit 2."""
    p = Path(path)
    if p.is_file():
        return p
    print(f"{sys.argv[0]}: data file {p} not found (pass --data PATH).", file=sys.stderr)
    print(f"How to get it, README: {readme_line(readme_word)}", file=sys.stderr)
    raise SystemExit(2)
