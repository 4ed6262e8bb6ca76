"""The `memgate` command line: the parser and dispatch, one module per command group, onboarding, setup files and the systemd unit.

May import every other part of bot/ (bot.app builds the gateway for `run` and `chat`; a running gateway is reached only through bot.operator's API client); only bot.cli.run imports concrete adapters.
"""

from bot.cli.dispatch import main, parser

__all__ = ["main", "parser"]
