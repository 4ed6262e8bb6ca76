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
        try:
            async with httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_S) as http, \
                    streamable_http_client(self.url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool(tool, args)
        except* (MCPError, httpx2.HTTPError, OSError) as group:
            raise ToolError(f"the memgate gateway at {self.url} refused or failed the call ({_first(group)}); "
                            "a revoked or expired MEMGATE_API_KEY is refused") from None


def _first(group: BaseExceptionGroup) -> str:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
