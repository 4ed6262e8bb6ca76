"""The gateway's own admin key (issue 22, B6), with real `memgate` processes:

- a gateway killed with SIGKILL cannot revoke its key; the next start does, so the old api.token
  stops working and exactly one gateway key is live;
- the CLI sends the token only to the gateway that wrote it: whatever else answers at the
  published address (a process that took the port after a crash) never sees it, and the CLI
  falls back to the database.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest
from aiohttp import web

from tests.bot.cli.test_cli import env_for
from tests.bot.cli.test_cli_gateway import config, memgate, start_gateway
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.timeout(900)  # gateway starts and CLI runs on a loaded machine; nothing is timed


async def _status(url: str, token: str) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/api/v1/admin/stats", headers={"Authorization": f"Bearer {token}"}) as r:
            return r.status


async def test_a_killed_gateways_token_dies_when_it_starts_again(tmp_path, fake_llm):
    async with FakeTelegram() as tg:
        env = env_for(tmp_path, fake_llm, TELEGRAM_BOT_TOKEN=tg.token)
        env["MEMGATE_CONFIG"] = config(tmp_path, tg)
        data = tmp_path / "data"
        proc = await start_gateway(env, data)
        old = (data / "api.token").read_text().strip()
        url = json.loads((data / "api.json").read_text())["url"]
        assert await _status(url, old) == 200
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        proc = await start_gateway(env, data)
        try:
            new = (data / "api.token").read_text().strip()
            url = json.loads((data / "api.json").read_text())["url"]
            assert new != old
            assert await _status(url, old) == 401
            assert await _status(url, new) == 200
            async with aiohttp.ClientSession() as http:
                async with http.get(url + "/api/v1/admin/keys", headers={"Authorization": f"Bearer {new}"}) as r:
                    keys = (await r.json())["keys"]
            live = [k for k in keys if k["scope"] == "admin" and not k["revoked_at"]]
            assert len(live) == 1 and live[0]["prefix"] == new[:10], live
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 120) == 0


async def test_the_cli_sends_the_token_only_to_the_gateway_that_wrote_it(tmp_path):
    """After a crash, something else answers on the published port, looking like a gateway."""
    seen: list[dict[str, str]] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"status": "ok", "database": "ok", "requests": [], "keys": [], "jobs": []})

    impostor = web.Application()
    impostor.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(impostor)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    data = tmp_path / "data"
    data.mkdir(parents=True)
    token = "mg_" + "s3cr3t" * 7
    (data / "api.json").write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": os.getpid()}))
    (data / "api.token").write_text(token + "\n")
    try:
        out = await memgate(env_for(tmp_path), "pairing", "list")
    finally:
        await runner.cleanup()
    assert seen, "the CLI did probe the address"
    assert not [h for h in seen if token in json.dumps(h)], "the token reached the impostor"
    assert out.returncode == 0 and out.stdout == "no pending pairing requests\n", out.stderr
    assert "not the gateway that wrote" in out.stderr and "Traceback" not in out.stderr
