"""Shared fixtures: real DuckDB files in temp folders, the real local embedder, the fake LLM
server reached through the real litellm, and a movable clock."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from memory.embed import LocalE5Embedder
from memory.llm import LiteLLM, LLMSettings
from memory.store.connection import Store
from tests.fakes.clock import FakeClock
from tests.fakes.llm_server import FakeLLM


@pytest.fixture(scope="session")
def embedder() -> LocalE5Embedder:
    return LocalE5Embedder()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "memory.duckdb", 384)
    yield s
    s.close()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """One real PostgreSQL + pgvector for the session (started on first use, ~1 s)."""
    from tests.fakes.postgres import SessionPostgres

    server = SessionPostgres(tmp_path_factory.mktemp("pgdata"))
    yield server
    server.stop()


@pytest.fixture
def pg_url(postgres):
    """The URL of a fresh, empty schema of the session's PostgreSQL (dropped afterwards)."""
    schema, url = postgres.fresh_schema()
    yield url
    postgres.drop_schema(schema)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def fake_llm():
    async with FakeLLM() as server:
        yield server


@pytest.fixture
def llm(fake_llm) -> LiteLLM:
    return LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, api_key="sk-test",
                               timeout=10, retries=0, backoff=0.01))
