"""memgate's gateway: the channel port, access, queues, commands, the agent loop, tools, scheduler.

May import memory/ (through memory.engine and its public types); only bot.app and bot.cli import adapters/.
"""

from bot.message import Document, Image, Kind, Message, Reply

__all__ = ["Document", "Image", "Kind", "Message", "Reply"]
