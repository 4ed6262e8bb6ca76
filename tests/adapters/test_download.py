"""adapters/download.py: a capped download, refused as too large whether the server declares the
length or streams the body without one (then the reading stops once it passes the cap)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from adapters.download import fetch_url
from bot.errors import MediaError

CAP = 4096


@pytest.fixture
async def server():
    sent: dict[str, int] = {}

    async def streamed(request: web.Request) -> web.StreamResponse:
        # Chunked, with no Content-Length: only the reading can tell it is over the cap.
        size = int(request.query["size"])
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent["streamed"] = 0
        try:
            while sent["streamed"] < size:
                await resp.write(b"x" * 1024)
                sent["streamed"] += 1024
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass
        return resp

    async def declared(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * int(request.query["size"]))

    app = web.Application()
    app.router.add_get("/streamed", streamed)
    app.router.add_get("/declared", declared)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    async with aiohttp.ClientSession() as http:
        yield http, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


@pytest.mark.parametrize("path", ["streamed", "declared"])
async def test_a_file_under_the_cap_is_read_whole_and_one_over_it_is_too_large(server, path):
    http, base = server
    assert await fetch_url(http, f"{base}/{path}?size={CAP - 1024}", max_bytes=CAP, timeout=5, what="cdn") == \
        b"x" * (CAP - 1024)
    with pytest.raises(MediaError) as refused:
        await fetch_url(http, f"{base}/{path}?size={CAP * 64}", max_bytes=CAP, timeout=5, what="cdn")
    assert refused.value.too_large and "cap" in str(refused.value)
