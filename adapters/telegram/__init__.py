"""Telegram: the python-telegram-bot adapter and Markdown -> Telegram HTML formatting.

May import bot's port, adapters.split and adapters.plaintext.
"""
