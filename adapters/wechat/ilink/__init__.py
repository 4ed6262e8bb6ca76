"""WeChat iLink bot API: protocol (requests, replies, errors), QR login, the saved state files and the adapter.

May import bot's port, adapters.split and adapters.plaintext.
"""
