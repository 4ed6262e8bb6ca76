"""memgate's gateway: the port channels implement (message, channel, errors), access/, delivery/, turn/, operator/, api/, the composition root (app) and the command line (cli/).

May import memory/ (through memory.engine and its public types); inside bot/ imports point down tests/test_layers.py's BOT_ORDER; only bot.app and bot.cli.run import adapters/.
"""

from bot.message import Document, Image, Kind, Message, Reply

__all__ = ["Document", "Image", "Kind", "Message", "Reply"]
