"""A recording reverse proxy on 127.0.0.1 between memgate and a model server: every request is
forwarded as it is (a streamed answer piece by piece, as it comes), and kept with its timings and
what came back, so a test sees the prompts memgate sent (the memory block of a reply) and when
each call started and ended, whatever the model answered. A test waits on `calls` while it
reads what it drives (a terminal nobody reads stops the process writing to it)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"})


@dataclass
class Call:
    """One request through the proxy."""

    path: str
    body: dict
    started: float                      # time.monotonic()
    first_byte: float | None = None
    ended: float | None = None
    status: int | None = None
    answer: str = ""                    # the response body as text (a stream: its raw SSE lines)
    held: bool = False                  # its stream is held after its first words (see RecordingProxy.hold)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict]:
        return list(self.body.get("messages") or [])

    def content(self) -> str:
        """The model's text: the message of a whole answer, the pieces of a streamed one."""
        if not self.streamed:
            try:
                return json.loads(self.answer)["choices"][0]["message"].get("content") or ""
            except (ValueError, KeyError, IndexError, TypeError):
                return ""
        return stream_text(self.answer)


def stream_text(raw: str) -> str:
    """The text of an OpenAI-style SSE stream (its `delta.content` pieces, joined)."""
    pieces = []
    for line in raw.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            try:
                for choice in json.loads(line[6:]).get("choices") or ():
                    pieces.append((choice.get("delta") or {}).get("content") or "")
            except (ValueError, AttributeError):
                continue
    return "".join(pieces)


def whole_words(text: str) -> str:
    """The words of a growing text that whitespace has ended: all memgate shows of a reply being
    written (memory.redaction.redact_growing keeps the last word back, it may still grow)."""
    return text[:max(0, *(text.rfind(c) for c in " \n\t"))].strip()


@dataclass
class RecordingProxy:
    upstream: str                       # the server's root, e.g. http://127.0.0.1:PORT
    calls: list[Call] = field(default_factory=list)
    # A streamed call this says yes to is held once its first word is whole, until the test sets
    # its `release`: what memgate shows meanwhile is what it showed while the model was writing.
    hold: Callable[[Call], bool] | None = None
    _runner: web.AppRunner | None = None
    _http: aiohttp.ClientSession | None = None
    port: int = 0

    async def __aenter__(self) -> RecordingProxy:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible root to give memgate (MEMGATE_LLM_API_BASE)."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._http is not None
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        call = Call(request.path, body if isinstance(body, dict) else {}, time.monotonic())
        self.calls.append(call)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            async with self._http.request(request.method, self.upstream + request.path_qs, data=raw,
                                          headers=headers) as up:
                resp = web.StreamResponse(status=up.status,
                                          headers={k: v for k, v in up.headers.items() if k.lower() not in _HOP})
                await resp.prepare(request)
                got = bytearray()
                holding = call.streamed and self.hold is not None and self.hold(call)
                async for piece in up.content.iter_any():
                    if call.first_byte is None:
                        call.first_byte = time.monotonic()
                    got += piece
                    await resp.write(piece)
                    if holding and whole_words(stream_text(got.decode("utf-8", "replace"))):
                        holding, call.held, call.answer = False, True, got.decode("utf-8", "replace")
                        await call.release.wait()
                await resp.write_eof()
                call.status, call.answer = up.status, got.decode("utf-8", "replace")
                return resp
        finally:
            call.ended = time.monotonic()
