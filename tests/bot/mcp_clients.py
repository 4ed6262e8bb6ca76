"""The official MCP SDK's own client on memgate's two transports: streamable HTTP at a gateway's
/mcp (with an API key) and `memgate mcp` over stdio (a subprocess). Both yield an initialised
`ClientSession`; `call` returns (is_error, the answer's JSON)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
import httpx2


@asynccontextmanager
async def http_session(url: str, key: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}", **(headers or {})}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> tuple[bool, Any]:
    """One tool call: (is_error, the JSON answer, or the error's text)."""
    res = await session.call_tool(tool, args)
    text = res.content[0].text if res.content else ""
    if res.is_error:
        return True, text
    return False, json.loads(text)
