"""Store URLs: the backend chosen by scheme, a password never accepted inside one (it comes from
the environment), every bad URL one StoreError line."""

from __future__ import annotations


import pytest
from hypothesis import given, strategies as st

from memory.errors import StoreError
from memory.store.backend import MemoryStore, open_store
from memory.store.connection import Store
from memory.store.url import duckdb_url, parse_store_url


def test_duckdb_url_round_trips_a_path(tmp_path):
    url = duckdb_url(tmp_path / "m.duckdb")
    assert url == f"duckdb://{tmp_path}/m.duckdb"
    assert parse_store_url(url).path == tmp_path / "m.duckdb"
    assert parse_store_url("duckdb://:memory:").path == ":memory:"


def test_open_store_opens_duckdb_behind_the_protocol(tmp_path):
    s = open_store(duckdb_url(tmp_path / "m.duckdb"), 384)
    try:
        assert isinstance(s, Store) and isinstance(s, MemoryStore)
        assert s.backend == "duckdb" and s.dim == 384
        s.write(lambda c: s.meta_set(c, "k", "v"))
        assert s.meta_get("k") == "v"
    finally:
        s.close()
    assert (tmp_path / "m.duckdb").exists()


def test_postgresql_url_keeps_user_host_and_options():
    u = parse_store_url("postgresql://bob@db.internal:6543/memgate?sslmode=require")
    assert u.backend == "postgresql"
    assert u.conninfo == "postgresql://bob@db.internal:6543/memgate?sslmode=require"
    assert parse_store_url("postgres://bob@h/m").backend == "postgresql"


@pytest.mark.parametrize("url, words", [
    ("postgresql://bob:pw@h/m", "MEMGATE_STORE_PASSWORD"),
    ("postgresql://bob@h", "names no database"),
    ("postgresql://bob@h:port/m", "not a valid"),
    ("sqlite:///x.db", "unknown scheme"),
    ("/var/lib/memgate.duckdb", "no scheme"),
    ("duckdb://x.duckdb", "absolute"),
])
def test_bad_urls_are_one_line(url, words):
    with pytest.raises(StoreError) as got:
        parse_store_url(url)
    assert words in str(got.value) and "\n" not in str(got.value)


@given(st.text(alphabet=st.characters(blacklist_characters="@/:?#[]", blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20))
def test_a_password_is_refused_and_never_shown(pw):
    with pytest.raises(StoreError) as got:
        parse_store_url(f"postgresql://bob:{pw}@127.0.0.1:5432/memgate")
    assert str(got.value) == ("store url contains a password: remove it and set MEMGATE_STORE_PASSWORD "
                              "(or PGPASSWORD) in the environment instead")
