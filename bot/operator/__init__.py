"""The server operator's work, the same with or without a running gateway: the Operator protocol, its values and wire format, LocalOperator (on the database), RemoteOperator and the gateway client (through the admin API).

May import bot's port and shared modules, access/ and memory/; never the turn, delivery, api or cli. The admin API (bot.api.routes_operator) serves it; the command line drives it.
"""
