"""The MCP server other agents talk to: the official SDK's `MCPServer` with memgate's eight memory
tools (search, store, get, recent, forget, timeline, pulse, erase_everything) and two reminder tools (remind, reminders). Each tool only validates its arguments
(the schemas clients see come from these signatures) and hands them to the `MemoryDoor` of the call,
which `door_for` finds: on the gateway, the door of the request's API key; in `memgate mcp`, the
running gateway's or the local store's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from bot.mcp.door import ERASE_PHRASE, MAX_TEXT, MemoryDoor
from memory.prompts import (MCP_ERASE, MCP_FORGET, MCP_GET, MCP_INSTRUCTIONS, MCP_PULSE, MCP_RECENT, MCP_REMIND,
                            MCP_REMINDERS, MCP_SEARCH, MCP_STORE, MCP_TIMELINE)

SERVER_NAME = "memgate"
DoorFor = Callable[[Context], Awaitable[MemoryDoor]]
MemoryId = Annotated[str, Field(min_length=1, max_length=64, description="a memory id from a search, recent or timeline result")]


class TurnIn(BaseModel):
    """One message of a conversation turn handed to `store`."""

    role: Literal["user", "assistant"]
    content: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]


READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def build_server(door_for: DoorFor) -> MCPServer:
    """The server and its tools; `door_for(ctx)` is asked once per call."""
    mcp = MCPServer(SERVER_NAME, instructions=MCP_INSTRUCTIONS, log_level="WARNING")

    async def search(ctx: Context,
                     query: Annotated[str, Field(min_length=1, max_length=2000, description="short keywords or a question")],
                     limit: Annotated[int, Field(ge=1, le=50, description="at most this many results")] = 10,
                     ) -> CallToolResult:
        return await (await door_for(ctx)).call("search", {"query": query, "limit": limit})

    async def store(ctx: Context,
                    text: Annotated[str | None, Field(max_length=MAX_TEXT, description="one lasting fact")] = None,
                    messages: Annotated[list[TurnIn] | None, Field(max_length=100,
                                        description="a conversation turn, oldest first")] = None,
                    pinned: Annotated[bool, Field(description="a fact never changed automatically")] = False,
                    conversation_id: Annotated[str | None, Field(max_length=200,
                                               description="groups turns of one conversation")] = None,
                    ) -> CallToolResult:
        args: dict = {"pinned": pinned, "conversation_id": conversation_id}
        if text is not None:
            args["text"] = text
        if messages is not None:
            args["messages"] = [m.model_dump() for m in messages]
        return await (await door_for(ctx)).call("store", args)

    async def get(ctx: Context, id: MemoryId) -> CallToolResult:
        return await (await door_for(ctx)).call("get", {"id": id})

    async def recent(ctx: Context,
                     kind: Literal["fact", "chunk", "task", "all"] = "fact",
                     limit: Annotated[int, Field(ge=1, le=100)] = 20) -> CallToolResult:
        return await (await door_for(ctx)).call("recent", {"kind": kind, "limit": limit})

    async def forget(ctx: Context, id: MemoryId) -> CallToolResult:
        return await (await door_for(ctx)).call("forget", {"id": id})

    async def timeline(ctx: Context, id: MemoryId,
                       window: Annotated[int, Field(ge=1, le=10, description="messages before and after")] = 3,
                       ) -> CallToolResult:
        return await (await door_for(ctx)).call("timeline", {"id": id, "window": window})

    async def pulse(ctx: Context, days: Literal[7, 30] = 7) -> CallToolResult:
        return await (await door_for(ctx)).call("pulse", {"days": days})

    async def remind(ctx: Context,
                     when: Annotated[str, Field(min_length=1, max_length=200, description="e.g. tomorrow 9:00")],
                     what: Annotated[str, Field(min_length=1, max_length=1000, description="what to remind of")],
                     ) -> CallToolResult:
        return await (await door_for(ctx)).call("remind", {"when": when, "what": what})

    async def reminders(ctx: Context,
                        cancel: Annotated[int | None, Field(ge=1, description="the id of a reminder to cancel")] = None,
                        ) -> CallToolResult:
        return await (await door_for(ctx)).call("reminders", {"cancel": cancel})

    async def erase_everything(ctx: Context,
                               confirm: Annotated[str, Field(max_length=100, description=f'exactly "{ERASE_PHRASE}" '
                                                             "to erase; anything else only shows what would go")] = "",
                               ) -> CallToolResult:
        return await (await door_for(ctx)).call("erase_everything", {"confirm": confirm})

    write = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    for fn, description, hints in (
            (search, MCP_SEARCH, READ), (store, MCP_STORE, write), (get, MCP_GET, READ), (recent, MCP_RECENT, READ),
            (forget, MCP_FORGET, ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)),
            (timeline, MCP_TIMELINE, READ), (pulse, MCP_PULSE, READ), (remind, MCP_REMIND, write),
            (reminders, MCP_REMINDERS, ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)),
            (erase_everything, MCP_ERASE.format(phrase=ERASE_PHRASE),
             ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False))):
        mcp.add_tool(fn, name=fn.__name__, description=description, annotations=hints, structured_output=False)
    return mcp
