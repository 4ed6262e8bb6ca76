"""DuckDB's parameter markers in psycopg's format: the one piece of SQL text the PostgreSQL
backend rewrites, so the statements memgate writes once run on both backends.

DuckDB takes `?` (positional) and `$name` (named); psycopg takes `%s` and `%(name)s`, and
reads every other `%` as a marker, so a literal `%` becomes `%%`. Markers are rewritten only
outside string literals ('...' with '' inside), quoted identifiers ("..."), dollar-quoted
bodies ($$...$$, $tag$...$tag$), `--` line comments and `/* */` block comments. `??` stands for a
literal `?` (PostgreSQL's jsonb `?` operator), as in JDBC.

Anything beyond the markers (types, functions, upserts) is not rewritten: statements are either
portable SQL or come from the backend's `Dialect`.
"""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def to_pyformat(sql: str) -> tuple[str, bool]:
    """(`sql` with psycopg markers, whether it used named markers). Raises ValueError when it
    mixes `?` and `$name` (psycopg cannot take both) or leaves a quote or comment open."""
    out: list[str] = []
    i, n = 0, len(sql)
    positional = named = False
    while i < n:
        c = sql[i]
        if c == "'" or c == '"':
            end = _quoted_end(sql, i, c)
            out.append(_percent(sql[i:end]))
            i = end
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(_percent(sql[i:end]))
            i = end
        elif c == "/" and sql.startswith("/*", i):
            end = _block_end(sql, i)
            out.append(_percent(sql[i:end]))
            i = end
        elif c == "?":
            if sql.startswith("??", i):
                out.append("?")
                i += 2
            else:
                out.append("%s")
                positional = True
                i += 1
        elif c == "%":
            out.append("%%")
            i += 1
        elif c == "$":
            m = _IDENT.match(sql, i + 1)
            tag_end = m.end() if m else i + 1
            if tag_end < n and sql[tag_end] == "$":         # $$ or $tag$: a dollar-quoted body
                tag = sql[i:tag_end + 1]
                close = sql.find(tag, tag_end + 1)
                if close < 0:
                    raise ValueError(f"unterminated dollar-quoted string {tag}")
                out.append(_percent(sql[i:close + len(tag)]))
                i = close + len(tag)
            elif m and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
                out.append(f"%({m.group()})s")
                named = True
                i = m.end()
            else:
                out.append("$")
                i += 1
        else:
            j = i + 1
            while j < n and sql[j] not in "'\"-/?%$":
                j += 1
            out.append(sql[i:j])
            i = j
    if positional and named:
        raise ValueError("a statement mixes ? and $name parameters")
    return "".join(out), named


def _percent(text: str) -> str:
    return text.replace("%", "%%")


def _quoted_end(sql: str, i: int, q: str) -> int:
    j = i + 1
    while True:
        k = sql.find(q, j)
        if k < 0:
            raise ValueError(f"unterminated {q}...{q} in SQL")
        if sql.startswith(q + q, k):     # a doubled quote stays inside
            j = k + 2
            continue
        return k + 1


def _block_end(sql: str, i: int) -> int:
    # PostgreSQL block comments nest.
    depth, j = 0, i
    while j < len(sql):
        if sql.startswith("/*", j):
            depth += 1
            j += 2
        elif sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    raise ValueError("unterminated /* comment in SQL")
