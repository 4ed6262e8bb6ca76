"""memgate's gateway layer: access, queues, commands, the agent loop and the scheduler."""

from bot.message import Document, Kind, Message, Reply

__all__ = ["Document", "Kind", "Message", "Reply"]
