"""The memory suites run on both backends: `store` is a DuckDB file or a fresh PostgreSQL schema,
and `new_store()` makes more of the same backend (a test that needs several, or one per
hypothesis example).

Tests that are DuckDB's by nature (WAL replay, file locks, the DDL marker, SIGKILLed children
holding the file) open a `Store` file themselves; a test using `store` that is marked
`duckdb_only(reason)` has its postgres case skipped with the reason. `-m "not postgres"` runs
the DuckDB half alone.
"""

from __future__ import annotations

import pytest

from memory.store.backend import open_store
from memory.store.connection import Store

BACKENDS = ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def new_store(request, tmp_path_factory):
    only = request.node.get_closest_marker("duckdb_only")
    if only is not None and request.param != "duckdb":
        pytest.skip(f"DuckDB only: {only.args[0]}")
    made, schemas = [], []
    pg = request.getfixturevalue("postgres") if request.param == "postgres" else None

    def make(dim: int = 384):
        if pg is None:
            s = Store(tmp_path_factory.mktemp("store") / "memory.duckdb", dim)
        else:
            schema, url = pg.fresh_schema()
            schemas.append(schema)
            s = open_store(url, dim)
        made.append(s)
        return s

    make.backend = request.param
    yield make
    for s in made:
        s.close()
    for schema in schemas:
        pg.drop_schema(schema)


@pytest.fixture
def store(new_store):
    return new_store()
