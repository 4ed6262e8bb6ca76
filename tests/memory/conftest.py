"""The memory suites run on both backends: `store` is a DuckDB file or a fresh PostgreSQL schema.

Tests that are DuckDB's by nature (WAL replay, file locks, the DDL marker) open a `Store` file
themselves and say why; `-m "not postgres"` runs the DuckDB half alone.
"""

from __future__ import annotations

import pytest

from memory.store.backend import open_store
from memory.store.connection import Store


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    only = request.node.get_closest_marker("duckdb_only")
    if only is not None and request.param != "duckdb":
        pytest.skip(f"DuckDB only: {only.args[0]}")
    if request.param == "duckdb":
        s = Store(tmp_path / "memory.duckdb", 384)
    else:
        s = open_store(request.getfixturevalue("pg_url"), 384)
    yield s
    s.close()
