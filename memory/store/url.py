"""Store URLs: `duckdb:///abs/path.duckdb` (or `duckdb://:memory:`) and
`postgresql://user@host:port/db?options`. A password is never part of one: it comes from the
environment, so a URL can be written in a config file, logged and shown by `memgate doctor`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from memory.errors import StoreError

Backend = Literal["duckdb", "postgresql"]
_PG_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True, slots=True)
class StoreURL:
    backend: Backend
    path: Path | str = ""              # duckdb: the file (or ":memory:")
    conninfo: str = ""                 # postgresql: the URL as libpq takes it (no password)

    def __str__(self) -> str:
        return f"duckdb://{self.path}" if self.backend == "duckdb" else self.conninfo


def duckdb_url(path: Path | str) -> str:
    """The URL of a DuckDB file (`duckdb:///abs/path`)."""
    return f"duckdb://{path}" if str(path) == ":memory:" else f"duckdb://{Path(path).expanduser().absolute()}"


def parse_store_url(url: str) -> StoreURL:
    """Parse a store URL; every way it can be wrong is one StoreError line naming it."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise StoreError(f"store url {text!r} has no scheme: use duckdb:///path/memgate.duckdb or postgresql://user@host/db")
    if scheme == "duckdb":
        if rest == ":memory:":
            return StoreURL("duckdb", ":memory:")
        if not rest.startswith("/") and not rest.startswith("~"):
            raise StoreError(f"store url {text!r}: a DuckDB path must be absolute (duckdb:///path/memgate.duckdb)")
        return StoreURL("duckdb", Path(rest).expanduser())
    if scheme in _PG_SCHEMES:
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise StoreError(f"store url {_shown(text)!r} is not a valid PostgreSQL URL: {exc}") from None
        if parts.password:  # an empty one ("user:@host") is no password
            raise StoreError("store url contains a password: remove it and set MEMGATE_STORE_PASSWORD "
                             "(or PGPASSWORD) in the environment instead")
        if not parts.path.strip("/"):
            raise StoreError(f"store url {text!r} names no database (postgresql://user@host/dbname)")
        return StoreURL("postgresql", conninfo=text)
    raise StoreError(f"store url {_shown(text)!r}: unknown scheme {scheme!r} (duckdb or postgresql)")


def _shown(text: str) -> str:
    """The URL with anything between '://' and '@' masked (it may hold a password)."""
    head, sep, rest = text.partition("://")
    if sep and "@" in rest:
        return f"{head}://***@{rest.rsplit('@', 1)[1]}"
    return text
