"""Reliability scenarios of the HTTP API (issue 11): a write accepted with 202 is stored (mem9's
"accepted but never appeared"), even across a gateway restart before the worker ran, and a
key for one space never reads another's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from bot.app import build_app
from bot.settings import ApiConfig, Settings
from memory.embed import LocalE5Embedder
from tests.reliability.harness import Counts, assert_safe, scenario

_EMBEDDER: LocalE5Embedder | None = None


def _embedder() -> LocalE5Embedder:
    global _EMBEDDER
    if _EMBEDDER is None:
        _EMBEDDER = LocalE5Embedder()
    return _EMBEDDER


async def _post_turns(url: str, key: str, n: int, tag: str) -> list[str]:
    jobs = []
    async with aiohttp.ClientSession(base_url=url) as http:
        for i in range(n):
            body = {"messages": [{"role": "user", "content": f"{tag} fact number {i}"}]}
            async with http.post("/api/v1/memories", json=body, headers={"X-API-Key": key}) as r:
                assert r.status == 202
                jobs.append((await r.json())["job_id"])
    return jobs


@scenario("api: 202 accepted while the worker is down, then a restart")
async def accepted_writes_survive_a_restart(tmp: Path) -> Counts:
    settings = Settings(data_dir=str(tmp / "data"), api=ApiConfig(port=0))
    n = 8
    app = build_app(settings, embedder=_embedder(), serve_api=True)
    async with app:
        await app.engine.worker.stop(drain=False)   # accepted while the worker is down (shutdown drains them)
        keys = app.extras["api"].keys
        key_a, key_b = keys.create("write", "u_a")[0], keys.create("read", "u_b")[0]
        jobs = await _post_turns(app.extras["api"].url, key_a, n, "restart")
    app = build_app(settings, embedder=_embedder(), serve_api=True)
    stored = leaked = 0
    async with app:
        await app.engine.worker.drain()
        async with aiohttp.ClientSession(base_url=app.extras["api"].url) as http:
            for j in jobs:
                async with http.get(f"/api/v1/jobs/{j}", headers={"X-API-Key": key_a}) as r:
                    body = await r.json()
                    stored += body["status"] == "done" and len(body["memory_ids"]) == 1
            for path in ("/api/v1/memories", "/api/v1/memories?q=restart fact", "/api/v1/export", "/api/v1/insight"):
                async with http.get(path, headers={"X-API-Key": key_b}) as r:
                    leaked += "restart fact" in await r.text()
            for j in jobs:
                async with http.get(f"/api/v1/jobs/{j}", headers={"X-API-Key": key_b}) as r:
                    leaked += r.status != 404
    return Counts("api: 202 accepted while the worker is down, then a restart", messages_in=n, answered=n,
                  stored=stored, lost=n - stored, leaked=leaked, note=json.dumps({"jobs": n}))


async def test_accepted_writes_survive_a_restart_and_never_leak(tmp_path):
    counts = await accepted_writes_survive_a_restart(tmp_path)
    assert counts.stored == counts.messages_in
    assert_safe(counts)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(asyncio.run(accepted_writes_survive_a_restart(Path(d))))
