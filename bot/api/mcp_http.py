"""MCP over streamable HTTP at /mcp, on the API's own aiohttp server.

The SDK serves streamable HTTP as an ASGI app (its `StreamableHTTPSessionManager`); here one aiohttp
route hands each request to it through a small ASGI bridge. Mounting it as a route, rather than
running the SDK's Starlette app on a port of its own, keeps one address and every guard the API
has: host names (421), foreign origins, the error shape, the per-key rate limit and, above all,
the key check of bot.api.auth, which has already run when the bridge starts. The key's door (its
one space, read-only or writable) rides in the ASGI scope to the tools (`ctx.request_context.request`).

Stateless, JSON answers: every POST is one self-contained exchange, so each call is authorised on
its own (no session a second key could reuse), a restarted gateway loses nothing a client holds,
and no long-lived event stream has to pass through the bridge. The memory tools send no
notifications, so nothing is lost by it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from mcp.server.mcpserver import Context

from bot.api.context import API_KEY, ENGINE, HOST
from bot.api.errors import ApiError
from bot.errors import ConfigError
from bot.mcp.door import EngineDoor, MemoryDoor
from bot.mcp.remote import USER_HEADER  # with the gateway's admin key (`memgate mcp`), whose memory: as --user
from bot.mcp.server import build_server
from bot.operator.local import person_space

log = logging.getLogger(__name__)
MCP_PATH = "/mcp"
_DOOR = "memgate.door"      # the ASGI scope's key for the request's door

Asgi = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


async def _door_of(ctx: Context) -> MemoryDoor:
    request = ctx.request_context.request
    door = request.scope.get(_DOOR) if request is not None else None
    if door is None:  # only the route below starts a request, and it always sets one
        raise RuntimeError("an MCP call without the door of its key")
    return door


class _NoStatelessGoodbye(logging.Filter):
    """The SDK logs "Terminating session: None" at INFO as every stateless request ends (several
    lines per MCP call, saying nothing); that line only is dropped, its warnings and errors pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not str(record.msg).startswith("Terminating session")


_SDK_TRANSPORT_LOG = "mcp.server.streamable_http"


class McpEndpoint:
    """The SDK's session manager for this app, started and stopped with it."""

    def __init__(self) -> None:
        sdk_log = logging.getLogger(_SDK_TRANSPORT_LOG)
        if not any(isinstance(f, _NoStatelessGoodbye) for f in sdk_log.filters):
            sdk_log.addFilter(_NoStatelessGoodbye())
        self.server = build_server(_door_of)
        # Builds the manager (the Starlette app around it is not used: the route below is the way in).
        self.server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True)
        self.manager = self.server.session_manager

    async def lifespan(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp cleanup_ctx. The manager's task group lives in a task of its own: aiohttp may start
        and clean up the app from different tasks, and a task group must end in the task it began in."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(run(), name="mcp session manager")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            task.result()  # raises what stopped it
        yield
        stop.set()
        await task

    async def handle(self, request: web.Request) -> web.StreamResponse:
        door = await key_door(request)
        return await run_asgi(self.manager.handle_request, request, {_DOOR: door})


async def key_door(request: web.Request) -> EngineDoor:
    """The door of the request's key: its space, writable with write scope. The gateway's admin key
    (what `memgate mcp` holds through a running gateway) names the person in X-Memgate-User."""
    rec, engine = request[API_KEY], request.app[ENGINE]
    if rec.scope != "admin":
        assert rec.space_id is not None
        return EngineDoor(engine, rec.space_id, writable=rec.scope == "write", reminders=request.app[HOST].reminders)
    who = request.headers.get(USER_HEADER, "").strip()
    if not who:
        raise ApiError(403, "forbidden", f"an admin key reaches MCP only for a person named in {USER_HEADER}; "
                       "give agents a space key (memgate keys create --user NAME)")
    try:
        space = await person_space(request.app[HOST].access, who, create=True)
    except ConfigError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return EngineDoor(engine, space, writable=True, reminders=request.app[HOST].reminders)


async def run_asgi(asgi: Asgi, request: web.Request, extra: dict[str, Any]) -> web.StreamResponse:
    """One HTTP request through an ASGI app (http scope only): the body as one message, the answer
    streamed as the app sends it."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}", "method": request.method,
        "scheme": request.scheme, "path": request.path, "raw_path": request.raw_path.split("?")[0].encode(),
        "query_string": request.query_string.encode("latin-1"), "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None, **extra,
    }
    done = asyncio.Event()
    body_read = False
    response: web.StreamResponse | None = None

    async def receive() -> dict:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": await request.read(), "more_body": False}
        await done.wait()  # nothing more comes: "disconnected" once the answer is over
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for k, v in message.get("headers", ()):
                response.headers.add(k.decode("latin-1"), v.decode("latin-1"))
        elif message["type"] == "http.response.body" and response is not None:
            if not response.prepared:
                await response.prepare(request)
            if message.get("body"):
                await response.write(message["body"])
            if not message.get("more_body", False):
                await response.write_eof()

    try:
        await asgi(scope, receive, send)
    finally:
        done.set()
    if response is None:
        raise ApiError(500, "internal", "the MCP server gave no answer")
    if not response.prepared:
        await response.prepare(request)
        await response.write_eof()
    return response
