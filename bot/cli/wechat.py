"""`memgate wechat login`: log the WeChat (iLink) bot in with a QR code scanned from its WeChat account."""

from __future__ import annotations

import argparse
import asyncio

from bot.logs import setup_logging
from bot.settings import Settings


def cmd_wechat(settings: Settings, args) -> int:
    """Show the QR code, wait for the scan, save the credentials in the data folder."""
    from bot.cli.run import wechat_login

    setup_logging(settings, to_file=False)
    bot_id = asyncio.run(wechat_login(settings.channels.wechat.base_url or None, settings.data_path))
    print(f"logged in as bot {bot_id}; credentials saved in {settings.data_path}")
    return 0


def add_wechat(sub: argparse._SubParsersAction) -> None:
    """`memgate wechat login`."""
    w = sub.add_parser("wechat", help="WeChat iLink bot")
    w.add_argument("action", choices=["login"], help="login: show a QR code to scan with the bot's WeChat account")
    w.set_defaults(func=cmd_wechat)
