"""memgate's HTTP API: the aiohttp app, API keys and their auth, the routes, Prometheus metrics.

May import bot/ (never bot.app or bot.cli) and memory/; never adapters/. bot.app wires it in.
"""
