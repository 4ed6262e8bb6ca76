"""WeChat: the official iLink bot API, Official Accounts (safe mode callbacks) and wechaty.

May import bot's port, adapters.split and adapters.plaintext.
"""
