"""The person's memory for other agents over MCP: the tools (`server`, on the official SDK's
MCPServer) and the door a call opens on one space (`door`: on the engine; `remote`: through a
running gateway's /mcp).

May import bot's port, shared modules, access/, operator/ and memory/; never the turn, delivery,
api or cli. The API serves it at /mcp (bot.api.mcp_http); `memgate mcp` serves it over stdio.
"""
