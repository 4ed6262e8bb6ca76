"""The terminal's input history in the data folder (`console_history`): what a forget or an erase
takes out of it, so a forgotten text is in no file there (issue 35).

The file is prompt_toolkit's FileHistory, which adapters/line_editing.py keeps: entries of
'+'-prefixed lines, each after a '# <time>' line. An entry goes when it holds a forgotten text
(the line "/remember my code is X" holds the fact "my code is X"); a text shorter than
`MIN_CONTAINED` goes only as a whole entry, so forgetting "ok" does not empty the history.
The file is written beside and renamed over, 0600.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memory.private_files import write_private

HISTORY_NAME = "console_history"
MIN_CONTAINED = 8


def _entries(raw: str) -> list[tuple[list[str], str]]:
    """(the entry's lines as written, its text) in file order."""
    out: list[tuple[list[str], str]] = []
    lines: list[str] = []
    for line in raw.splitlines(keepends=True):
        if line.startswith("#") and any(x.startswith("+") for x in lines):
            out.append((lines, "".join(x[1:] for x in lines if x.startswith("+")).rstrip("\n")))
            lines = []
        lines.append(line)
    if lines:
        out.append((lines, "".join(x[1:] for x in lines if x.startswith("+")).rstrip("\n")))
    return out


def _held(entry: str, texts: Sequence[str]) -> bool:
    flat = " ".join(entry.split())
    return any(t and (flat == t or (len(t) >= MIN_CONTAINED and t in flat)) for t in texts)


def scrub(path: Path, texts: Sequence[str]) -> int:
    """Remove the entries holding any of `texts`; returns how many went (0: the file is untouched)."""
    path = Path(path)
    if not texts or not path.exists():
        return 0
    wanted = [" ".join(t.split()) for t in texts if t and t.strip()]
    entries = _entries(path.read_text(encoding="utf-8", errors="replace"))
    kept = [lines for lines, text in entries if not _held(text, wanted)]
    gone = len(entries) - len(kept)
    if gone:
        write_private(path, "".join("".join(lines) for lines in kept))
    return gone
