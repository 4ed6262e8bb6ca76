"""Who may talk to the bot and which memory spaces they reach: identities and roles, the DM and group policy, one-time codes, DM pairing, /link, API keys.

May import bot's port (message, channel, errors), config and memory/; never the turn, delivery, operator, api or cli packages.
"""
