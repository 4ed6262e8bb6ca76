"""What differs between the two backends' SQL, in one place. Everything else memgate writes is
SQL both take (upserts as `ON CONFLICT`, `unnest(?)` of bound lists, `IN (SELECT unnest(?))`).

Why a small object rather than rewriting arbitrary SQL: the differences are few and known
(vector types and search, DuckDB-only functions), a rewrite of arbitrary text would have to
parse SQL to be safe, and a statement that exists in two spellings is visible where it is used.
Only parameter markers are translated (memory/store/placeholders.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory.store.schema import Migration


def _vec(vec: Sequence[float]) -> str:
    return "[" + ",".join(f"{float(x):.6g}" for x in vec) + "]"


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str                          # "duckdb" | "postgresql"

    @property
    def postgres(self) -> bool:
        return self.name == "postgresql"

    def ddl(self, m: Migration, dim: int) -> str:
        """A migration's SQL for this backend: DuckDB's as written; PostgreSQL's with its own
        spelling of two types, or the migration's `postgres` text when it has one."""
        sql = m.sql if not self.postgres else (m.postgres if m.postgres is not None else m.sql)
        sql = sql.replace("{dim}", str(dim))
        if self.postgres:
            sql = re.sub(r"\bFLOAT\[(\d+)\]", r"vector(\1)", sql)
            sql = re.sub(r"\bDOUBLE\b(?!\s+PRECISION)", "DOUBLE PRECISION", sql)
        return sql

    def vector(self, marker: str, dim: int) -> str:
        """SQL of a vector parameter bound as `vector_literal(...)`."""
        return f"{marker}::vector({dim})" if self.postgres else f"{marker}::VARCHAR::FLOAT[{dim}]"

    def vectors(self, marker: str, dim: int) -> str:
        """SQL of many vectors bound as `vectors_param(...)`, as an array to unnest."""
        return f"{marker}::vector({dim})[]" if self.postgres else f"{marker}::VARCHAR::FLOAT[{dim}][]"

    def vectors_param(self, rows: Sequence[Sequence[float]]) -> Any:
        """Many vectors as one parameter (a list parameter of floats costs DuckDB ~60-90 ms; a
        string ~1 ms; PostgreSQL takes a text[] of vector literals)."""
        if self.postgres:
            return [_vec(r) for r in rows]
        return "[" + ",".join(_vec(r) for r in rows) + "]"

    def series(self, start: str, end: str, step: str) -> str:
        """A query of one column `start`: timestamps from `start` up to, not including, `end`."""
        if self.postgres:
            return f"SELECT g AS start FROM generate_series({start}, {end} - INTERVAL '1 microsecond', {step}) AS g"
        return f"SELECT range AS start FROM range({start}, {end}, {step})"

    def round9(self, expr: str) -> str:
        """A DOUBLE rounded to 9 decimals (PostgreSQL rounds only numerics to a scale)."""
        return f"round(({expr})::numeric, 9)::float8" if self.postgres else f"round({expr}, 9)"

    def quantile(self, expr: str, q: float) -> str:
        """The continuous `q`-quantile aggregate of `expr`."""
        if self.postgres:
            return f"percentile_cont({float(q)}) WITHIN GROUP (ORDER BY {expr})"
        return f"quantile_cont({expr}, {float(q)})"

    def json_patch(self, col: str, patch: str) -> str:
        """A JSON text column with the top-level keys of the literal `patch` replaced (DuckDB's
        json_merge_patch; PostgreSQL's jsonb `||`, which keeps a null where merge-patch drops the
        key: both read back as "absent")."""
        if self.postgres:
            return f"({col}::jsonb || '{patch}'::jsonb)::text"
        return f"json_merge_patch({col}, '{patch}')"

    def tags_from_json(self, col: str) -> str:
        """A JSON list of strings (one text per row, so ragged lists bind as one array) as VARCHAR[]."""
        if self.postgres:
            return f"ARRAY(SELECT jsonb_array_elements_text({col}::jsonb))::VARCHAR[]"
        return f"json_extract_string({col}, '$[*]')::VARCHAR[]"


DUCKDB = Dialect("duckdb")
POSTGRES = Dialect("postgresql")


def dialect_of(con: object) -> Dialect:
    """The dialect of a connection `write`/`read` handed over (PgConn says so; DuckDB's do not)."""
    return getattr(con, "dialect", DUCKDB)
