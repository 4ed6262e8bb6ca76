"""A real gateway App with its API on a free loopback port, a real store (a DuckDB file, or a
PostgreSQL schema: every test using `api` runs on both) and the real embedder; tests talk HTTP
to it with aiohttp's client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest

from bot.app import App, build_app
from bot.access.api_keys import Keys
from bot.settings import ApiConfig, Settings, StoreConfig


@dataclass
class Api:
    app: App
    http: aiohttp.ClientSession
    keys: Keys

    def key(self, space: str | None = "u_alice", scope: str = "write", **kw) -> str:
        return self.keys.create(scope, None if scope == "admin" else space, **kw)[0]

    async def call(self, method: str, path: str, key: str | None = None, **kw) -> tuple[int, object, object]:
        headers = dict(kw.pop("headers", {}))
        if key:
            headers["Authorization"] = f"Bearer {key}"
        async with self.http.request(method, path, headers=headers, **kw) as resp:
            ctype = resp.headers.get("Content-Type", "")
            body = await resp.json() if ctype.startswith("application/json") else await resp.text()
            return resp.status, body, resp.headers.copy()


def api_settings(tmp_path, store_url: str = "", **api) -> Settings:
    return Settings(data_dir=str(tmp_path / "data"), api=ApiConfig(port=0, **api), store=StoreConfig(url=store_url))


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def api_store_url(request) -> str:
    """The API suites run on both backends: "" (the DuckDB file) or a fresh PostgreSQL schema."""
    if request.param == "duckdb":
        return ""
    return request.getfixturevalue("pg_url")


@asynccontextmanager
async def serve(tmp_path, embedder, store_url: str = "", **api_kw) -> AsyncIterator[Api]:
    """The gateway App with its API on a free port, and a client session on it."""
    app = build_app(api_settings(tmp_path, store_url, **api_kw), embedder=embedder, serve_api=True)
    async with app:
        async with aiohttp.ClientSession(base_url=app.extras["api"].url) as http:
            yield Api(app, http, app.extras["api"].keys)


@pytest.fixture
async def api(tmp_path, embedder, api_store_url):
    async with serve(tmp_path, embedder, api_store_url) as running:
        yield running
