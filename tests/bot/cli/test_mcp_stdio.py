"""`memgate mcp` over stdio, driven by the official SDK's stdio client (a real subprocess): through a
running gateway (found by its api.json, as every CLI command finds it) with a space key, with a read
key (store refused) and with a revoked one; and with no gateway, on the database itself, which it
holds only during a call."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager

import pytest
import pytest_asyncio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from bot.app import open_store
from bot.mcp.door import READ_ONLY
from bot.settings import Settings
from tests.bot.api.conftest import serve
from tests.bot.cli.test_cli import ROOT, env_for
from tests.bot.mcp_clients import call

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]
TOOLS = {"search", "store", "get", "recent", "forget", "timeline", "pulse", "remind", "reminders", "erase_everything"}


@asynccontextmanager
async def stdio_session(tmp_path, *args: str, **env):
    """`memgate mcp ARGS` started by the SDK's stdio client, on the data folder tmp_path/data."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot.cli", "mcp", *args],
                                   env=env_for(tmp_path, **env), cwd=ROOT)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tmp_path_factory, embedder):
    """A gateway in this process, publishing its address in tmp/data as `memgate run` does."""
    tmp = tmp_path_factory.mktemp("mcp-stdio")
    async with serve(tmp, embedder) as api:
        api.tmp = tmp
        yield api


async def test_through_the_gateway_with_a_space_key(gw):
    await gw.app.engine.ensure_space("u_bob", "user")
    bobs = await gw.app.engine.remember("Bob keeps the spare key under the red flowerpot", "u_bob")
    async with stdio_session(gw.tmp, MEMGATE_API_KEY=gw.key("u_alice", "write")) as s:
        assert {t.name for t in (await s.list_tools()).tools} == TOOLS
        err, stored = await call(s, "store", {"text": "Alice's favourite editor is Helix"})
        assert not err and stored["status"] == "stored"
        # The gateway ran it: the row is in its store, in the key's space.
        assert [r.space_id for r in await gw.app.engine.get([stored["id"]], ["u_alice"])] == ["u_alice"]
        err, found = await call(s, "search", {"query": "favourite editor"})
        assert not err and stored["id"] in [r["id"] for r in found["results"]]
        err, found = await call(s, "search", {"query": "spare key red flowerpot"})
        assert bobs.id not in [r["id"] for r in found["results"]]
        err, _ = await call(s, "get", {"id": bobs.id})
        assert err
        err, gone = await call(s, "forget", {"id": stored["id"]})
        assert not err and gone["forgotten"] == [stored["id"]]
        err, found = await call(s, "search", {"query": "favourite editor"})
        assert stored["id"] not in [r["id"] for r in found["results"]]


async def test_a_read_key_cannot_store_and_a_revoked_key_is_refused(gw):
    key = gw.key("u_alice", "read")
    async with stdio_session(gw.tmp, MEMGATE_API_KEY=key) as s:
        err, found = await call(s, "search", {"query": "anything"})
        assert not err and "results" in found
        err, text = await call(s, "store", {"text": "Alice likes jazz"})
        assert err and text.endswith(READ_ONLY)
        gw.keys.revoke(key[:10])
        err, text = await call(s, "search", {"query": "anything"})
        assert err and "unknown, revoked or expired" in text


async def test_without_a_gateway_on_the_database_held_only_during_a_call(tmp_path):
    async with stdio_session(tmp_path, "--user", "zoe") as s:
        err, stored = await call(s, "store", {"text": "Zoe runs the Berlin marathon in September"})
        assert not err
        # Between calls the DuckDB file is free: `memgate run` (here: this open) is not locked out.
        store = open_store(Settings(data_dir=str(tmp_path / "data")))
        store.close()
        err, found = await call(s, "search", {"query": "marathon"})
        assert not err and [r["id"] for r in found["results"]] == [stored["id"]]
        err, _ = await call(s, "forget", {"id": stored["id"]})
        assert not err
        err, found = await call(s, "search", {"query": "marathon"})
        assert found["results"] == []


async def test_with_the_gateways_own_token_for_a_named_person(gw):
    """What `memgate mcp --user NAME` does with no key while a gateway runs (in this process: the
    same door the subprocess builds from find_gateway)."""
    import asyncio

    from bot.mcp.remote import GatewayDoor
    from bot.operator.gateway_client import find_gateway

    client = await asyncio.to_thread(find_gateway, gw.tmp / "data")
    assert client is not None
    res = await GatewayDoor(client.url + "/mcp", client.token, "yan").call("store", {"text": "Yan reads on trains"})
    assert not res.is_error
    yan = await gw.app.access.identity("console", "yan")
    assert [r.text for r in await gw.app.engine.get([res.structured_content["id"]], [yan.space_id])] == ["Yan reads on trains"]


async def test_a_bad_key_is_one_clear_line(tmp_path):
    import asyncio
    import subprocess

    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "mcp"], env=env_for(tmp_path, MEMGATE_API_KEY="hunter2"),
                         cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("memgate: MEMGATE_API_KEY is not a memgate API key (they start with mg_; "
                                  "memgate keys create --user NAME)")
