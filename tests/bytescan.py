"""Looking for words in the bytes of every file under a folder, the way someone holding a copy of
the data folder would (`grep -a`): no database is opened, nothing is decoded but the common
encodings a text can be stored in (UTF-8, UTF-16 either way, base64 at any of its three offsets,
JSON's \\u escapes)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path


def encodings(word: str) -> list[bytes]:
    """The byte strings `word` may appear as."""
    raw = word.encode("utf-8")
    out = [raw, word.encode("utf-16-le"), word.encode("utf-16-be")]
    escaped = "".join(c if ord(c) < 128 else f"\\u{ord(c):04x}" for c in word).encode()
    if escaped != raw:
        out.append(escaped)
    for shift in range(3):  # base64 of the word wherever it starts in the encoded text
        enc = base64.b64encode(b"\0" * shift + raw)[4 * ((shift + 2) // 3):]
        out.append(enc[: max(4, len(enc) - 4)])
    return out


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.is_file())


def find(folder: Path, words: list[str]) -> dict[str, list[str]]:
    """word -> the files (relative paths) holding it in some encoding."""
    found: dict[str, list[str]] = {w: [] for w in words}
    for path in files_under(folder):
        data = path.read_bytes()
        for w in words:
            if any(e in data for e in encodings(w)):
                found[w].append(str(path.relative_to(folder)))
    return found


# DuckDB compresses a string column segment (FSST, dictionaries) once it holds more than a few
# dozen strings: a word stored that way is not in the file's bytes as text, live or freed. A scan
# that should see every row and every freed block runs against files written with compression
# off: `force_compression` is DuckDB's own setting, given to every database this process opens.
PLAIN = {"force_compression": "uncompressed"}


def install_plain_duckdb() -> Callable[[], None]:
    """Make every DuckDB database this process opens write uncompressed segments; returns undo."""
    import duckdb

    real = duckdb.connect

    def connect(database: str = ":memory:", read_only: bool = False, config: dict | None = None, **kw):
        return real(database, read_only=read_only, config={**PLAIN, **(config or {})}, **kw)

    duckdb.connect = connect
    return lambda: setattr(duckdb, "connect", real)
