"""The command menu as Telegram takes it (setMyCommands): names it would refuse are left out,
descriptions cut to its limit, at most 100 commands."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from bot.channel import MenuCommand

log = logging.getLogger(__name__)

# setMyCommands: 1-32 of a-z, 0-9 and _ per name; 1-256 characters per description; 100 commands.
_MENU_NAME = re.compile(r"[a-z0-9_]{1,32}")
_MENU_DESCRIPTION_LIMIT = 256
_MENU_LIMIT = 100


def telegram_menu(commands: Sequence[MenuCommand]) -> list[tuple[str, str]]:
    """(name, description) pairs Telegram accepts: names it would refuse are left out, descriptions cut to 256."""
    menu = []
    for command in commands:
        name, description = command.name.lower(), " ".join(command.description.split())
        if not _MENU_NAME.fullmatch(name) or not description:
            log.warning("telegram: command /%s left out of the menu (Telegram would refuse it)", command.name)
            continue
        menu.append((name, description[:_MENU_DESCRIPTION_LIMIT]))
    return menu[:_MENU_LIMIT]
