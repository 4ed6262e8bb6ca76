"""`memgate mcp`: the memory tools over stdio, for MCP clients that start their server themselves
(Claude Code, Cursor, OpenClaw). Standard output is the protocol's; everything else goes to stderr.

Whose memory: the key in MEMGATE_API_KEY (its one space and scope bound every call, exactly as at
the gateway's /mcp), else `--user NAME` (default: the person `memgate chat` talks as).

Where each call goes is decided per call: to the running gateway's /mcp when one answers (with the
key, or the gateway's local admin token and the person's name), else to the database directly,
opened for that call and closed after. Holding the DuckDB file between calls would keep
`memgate run` from starting for as long as the agent stays open.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys
from typing import Any

from bot.settings import Settings

KEY_ENV = "MEMGATE_API_KEY"


def default_user(settings: Settings) -> str:
    """The person `memgate chat` talks as (bot.cli.run._console)."""
    return settings.channels.console.user or os.environ.get("USER") or getpass.getuser() or "me"


class LocalDoor:
    """The database itself, opened for one call at a time (the embedding model is loaded once).
    Calls take turns: a client may send several at once, and each opens and closes the file."""

    def __init__(self, settings: Settings, key: str | None, user: str) -> None:
        self.settings, self.key, self.user = settings, key, user
        self._embedder: Any = None
        self._turn = asyncio.Lock()

    async def call(self, tool: str, args: dict[str, Any]):
        from mcp.server.mcpserver.exceptions import ToolError

        from bot.model_clients import make_embedder
        from bot.cli.reach import open_app
        from bot.errors import StoreLockedError

        async with self._turn:
            if self._embedder is None:
                self._embedder = await asyncio.to_thread(make_embedder, self.settings)
            try:
                app = await asyncio.to_thread(open_app, self.settings, embedder=self._embedder)
            except StoreLockedError:
                # No gateway answered, yet something holds the file: a gateway serving no API, or
                # one starting right now.
                raise ToolError("the memgate database is in use by another process and no gateway API answers: "
                                "a running gateway needs [api] enabled = true for memgate mcp to go through it "
                                "(or it is just starting: try again in a moment)") from None
            try:
                return await (await self._door(app)).call(tool, args)
            finally:
                await asyncio.to_thread(app.store.close)

    async def _door(self, app):
        from mcp.server.mcpserver.exceptions import ToolError

        from bot.access.api_keys import Keys
        from bot.mcp.door import EngineDoor
        from bot.operator.local import person_space

        if self.key is None:
            return EngineDoor(app.engine, await person_space(app.access, self.user, create=True), writable=True)
        rec = await asyncio.to_thread(Keys(app.store, clock=app.clock).verify, self.key)
        if rec is None:
            raise ToolError(f"{KEY_ENV} is not a live key here (unknown, revoked or expired)")
        if rec.space_id is None:
            raise ToolError(f"{KEY_ENV} is an admin key; give agents a space key (memgate keys create --user NAME)")
        return EngineDoor(app.engine, rec.space_id, writable=rec.scope == "write")


def serve(settings: Settings, key: str | None, user: str) -> None:
    """Serve stdio until the client closes it."""
    from bot.logs import setup_logging
    from bot.mcp.remote import GatewayDoor
    from bot.mcp.server import build_server
    from bot.operator.gateway_client import find_gateway

    # Standard output is the protocol's: records go to stderr only (the client shows them), and
    # root has a handler before the SDK's server is built, so its logging.basicConfig does nothing.
    setup_logging(settings, to_file=False, to_stderr=logging.WARNING)
    local = LocalDoor(settings, key, user)
    lines: dict[tuple[str, str], GatewayDoor] = {}   # one session per gateway address and token

    async def door_for(ctx):
        gateway = await asyncio.to_thread(find_gateway, settings.data_path)
        if gateway is None:
            return local
        url, token = gateway.url + "/mcp", key or gateway.token
        if (url, token) not in lines:
            lines[(url, token)] = GatewayDoor(url, token, None if key else user)
        return lines[(url, token)]

    asyncio.run(build_server(door_for).run_stdio_async())


def cmd_mcp(settings: Settings, args) -> int:
    """`memgate mcp [--user NAME]`: stdio MCP server on this person's memory (or MEMGATE_API_KEY's space)."""
    from bot.errors import ConfigError

    key = os.environ.get(KEY_ENV, "").strip() or None
    if key and args.user:
        raise ConfigError(f"give either {KEY_ENV} (a key names its space) or --user, not both")
    if key and not key.startswith("mg_"):
        raise ConfigError(f"{KEY_ENV} is not a memgate API key (they start with mg_; memgate keys create --user NAME)")
    if sys.stdin is not None and sys.stdin.isatty():
        # Started by hand: it would sit waiting for JSON-RPC. Say what it is for, then serve anyway.
        print("memgate mcp speaks MCP on stdin/stdout: an MCP client starts it (docs/mcp.md has the configs "
              "for Claude Code, Cursor and OpenClaw). Ctrl-D ends it.", file=sys.stderr)
    serve(settings, key, args.user or default_user(settings))
    return 0


def add_mcp(sub: argparse._SubParsersAction) -> None:
    """`memgate mcp [--user NAME]`."""
    m = sub.add_parser("mcp", help="serve the memory to MCP clients over stdio (Claude Code, Cursor, OpenClaw)",
                       description="A stdio MCP server on one person's memory: through the running gateway when "
                                   f"there is one, else on the database. With {KEY_ENV} set, that key's space and "
                                   "scope bound every call.")
    m.add_argument("--user", help="whose memory (as in memgate chat --user NAME; default: the same person as chat)")
    m.set_defaults(func=cmd_mcp)
