"""The parameter-marker translator (DuckDB `?` / `$name` -> psycopg `%s` / `%(name)s`): markers
outside quotes and comments become psycopg's, everything inside stays byte for byte, `%` is
doubled where psycopg would read it, and `??` is a literal `?`."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from memory.store.placeholders import to_pyformat

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_word = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)


def _piece(kind: str, body: str) -> tuple[str, str]:
    """(DuckDB text, expected psycopg text) of one piece of a statement."""
    if kind == "string":
        s = "'" + body.replace("'", "''") + "'"
        return s, s.replace("%", "%%")
    if kind == "ident":
        s = '"' + body.replace('"', '""') + '"'
        return s, s.replace("%", "%%")
    if kind == "line":
        s = "--" + body.replace("\n", " ").replace("\r", " ") + "\n"
        return s, s.replace("%", "%%")
    if kind == "block":
        s = "/* " + body.replace("*", "").replace("/", "") + " */"  # no nested or early close
        return s, s.replace("%", "%%")
    if kind == "dollar":
        s = "$body$" + body.replace("$body$", "") + "$body$"
        return s, s.replace("%", "%%")
    if kind == "qmark":
        return " ? ", " %s "
    if kind == "escaped":
        return " ?? ", " ? "
    if kind == "percent":
        return " % ", " %% "
    raise AssertionError(kind)


_positional = st.lists(st.tuples(st.sampled_from(["string", "ident", "line", "block", "dollar", "qmark", "escaped", "percent"]), _text),
                       max_size=10)


@given(_positional)
def test_positional_markers_outside_quotes_and_comments(pieces):
    sql = expected = "SELECT 1"
    for kind, body in pieces:
        a, b = _piece(kind, body)
        sql, expected = sql + a, expected + b
    assert to_pyformat(sql) == (expected, False)


@given(st.lists(st.tuples(_word, st.sampled_from(["string", "line", "block", "percent"]), _text), min_size=1, max_size=8))
def test_named_markers(pieces):
    sql = expected = "SELECT 1"
    for name, kind, body in pieces:
        a, b = _piece(kind, body)
        sql += f" ${name}::VARCHAR{a}"
        expected += f" %({name})s::VARCHAR{b}"
    assert to_pyformat(sql) == (expected, True)


@pytest.mark.parametrize("sql, out", [
    ("SELECT '?', \"?\", ? -- ?\n", "SELECT '?', \"?\", %s -- ?\n"),
    ("SELECT 'it''s ?' || ?", "SELECT 'it''s ?' || %s"),
    ("SELECT json_extract_string(tags, '$[*]') FROM t WHERE a = ?", "SELECT json_extract_string(tags, '$[*]') FROM t WHERE a = %s"),
    ("SELECT x LIKE '%a%' AND y = $q", "SELECT x LIKE '%%a%%' AND y = %(q)s"),
    ("SELECT $$ ? $q $$, $q", "SELECT $$ ? $q $$, %(q)s"),
    ("SELECT /* a /* nested ? */ ? */ ?", "SELECT /* a /* nested ? */ ? */ %s"),
    ("SELECT data ?? 'key', ?", "SELECT data ? 'key', %s"),
])
def test_examples(sql, out):
    assert to_pyformat(sql)[0] == out


@pytest.mark.parametrize("sql", ["SELECT 'open", 'SELECT "open', "SELECT /* open", "SELECT $x$ open", "SELECT ?, $a"])
def test_malformed_statements_are_refused(sql):
    with pytest.raises(ValueError):
        to_pyformat(sql)
