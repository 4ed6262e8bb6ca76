"""A running gateway's memory, for `memgate mcp`: each tool call is passed as it is to the gateway's
/mcp with the SDK's own client, and its answer returned as it came. So the stdio server and the
HTTP one cannot disagree: the gateway alone runs the tools, with the key's space and scope.

One client session serves every call (one initialize and one tool list, then one POST a call). It
is owned by a task of its own, because an SDK session must close in the task that opened it and
each call comes in a task of its own. Any failure closes it and fails the calls waiting on it; the
next call opens a new one. The gateway's MCP is stateless, so a gateway restarted between two
calls is simply reached again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult

USER_HEADER = "X-Memgate-User"   # bot.api.mcp_http reads it: whose memory the gateway's admin key uses
CALL_TIMEOUT_S = 120.0           # a search on a busy gateway; a loopback answer takes milliseconds

Call = tuple[str, dict[str, Any], "asyncio.Future[CallToolResult]"]


class GatewayDoor:
    """The gateway at `url` (its /mcp), with a space key, or its admin token and a person's name."""

    def __init__(self, url: str, key: str, user: str | None = None) -> None:
        self.url, self.key, self.user = url, key, user
        self._calls: asyncio.Queue[Call] = asyncio.Queue()
        self._owner: asyncio.Task | None = None

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        if self._owner is None or self._owner.done():
            self._calls = asyncio.Queue()
            self._owner = asyncio.create_task(self._serve(self._calls), name=f"mcp line to {self.url}")
        owner = self._owner
        done: asyncio.Future[CallToolResult] = asyncio.get_running_loop().create_future()
        await self._calls.put((tool, args, done))
        await asyncio.wait((done, owner), return_when=asyncio.FIRST_COMPLETED)
        if not done.done():  # the session ended before it took this call
            raise ToolError(f"the memgate gateway at {self.url} closed the connection; try again")
        return done.result()

    async def _serve(self, calls: asyncio.Queue[Call]) -> None:
        headers = {"Authorization": f"Bearer {self.key}", **({USER_HEADER: self.user} if self.user else {})}
        refused: list[int] = []   # the SDK reports an HTTP refusal without its status: kept here

        async def note(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                refused.append(response.status_code)

        current: Call | None = None
        try:
            async with httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_S,
                                          event_hooks={"response": [note]}) as http, \
                    streamable_http_client(self.url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                while True:
                    current = await calls.get()
                    tool, args, done = current
                    result = await session.call_tool(tool, args)
                    if not done.done():
                        done.set_result(result)
                    current = None
        except BaseException as exc:
            error = ToolError(_why(self.url, refused[0] if refused else None, _first(exc)))
            waiting = [current] if current else []
            while not calls.empty():
                waiting.append(calls.get_nowait())
            for _, _, done in waiting:
                if not done.done():
                    done.set_exception(error)
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise


def _why(url: str, status: int | None, error: str) -> str:
    """One line for the calling model (and the person reading its log)."""
    if status == 401:
        return f"the memgate gateway at {url} refused the key (MEMGATE_API_KEY): unknown, revoked or expired"
    if status == 403:
        return f"the memgate gateway at {url} refused the call (HTTP 403: this key may not do that)"
    if status == 429:
        return f"the memgate gateway at {url} is rate-limiting this key; try again in a moment"
    return f"the memgate gateway at {url} failed the call ({f'HTTP {status}' if status else error})"


def _first(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
