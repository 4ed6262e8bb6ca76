"""A running gateway's memory, for `memgate mcp`: each tool call is passed as it is to the gateway's
/mcp with the SDK's own client, and its answer returned as it came. So the stdio server and the
HTTP one cannot disagree: the gateway alone runs the tools, with the key's space and scope.

One short exchange per call (initialize, the call): the gateway's MCP is stateless, and a gateway
restarted between two calls is simply reached again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

USER_HEADER = "X-Memgate-User"   # bot.api.mcp_http reads it: whose memory the gateway's admin key uses
CALL_TIMEOUT_S = 120.0           # a search on a busy gateway; a loopback answer takes milliseconds


@dataclass(frozen=True, slots=True)
class GatewayDoor:
    """The gateway at `url` (its /mcp), with a space key, or its admin token and a person's name."""

    url: str
    key: str
    user: str | None = None

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        headers = {"Authorization": f"Bearer {self.key}"}
        if self.user:
            headers[USER_HEADER] = self.user
        refused: list[int] = []   # the SDK reports an HTTP refusal without its status: kept here

        async def note(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                refused.append(response.status_code)

        try:
            async with httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_S,
                                          event_hooks={"response": [note]}) as http, \
                    streamable_http_client(self.url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool(tool, args)
        except* (MCPError, httpx2.HTTPError, OSError) as group:
            raise ToolError(_why(self.url, refused[0] if refused else None, _first(group))) from None


def _why(url: str, status: int | None, error: str) -> str:
    """One line for the calling model (and the person reading its log)."""
    if status == 401:
        return f"the memgate gateway at {url} refused the key (MEMGATE_API_KEY): unknown, revoked or expired"
    if status == 403:
        return f"the memgate gateway at {url} refused the call (HTTP 403: this key may not do that)"
    if status == 429:
        return f"the memgate gateway at {url} is rate-limiting this key; try again in a moment"
    return f"the memgate gateway at {url} failed the call ({f'HTTP {status}' if status else error})"


def _first(group: BaseExceptionGroup) -> str:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
