"""The wechaty SDK (0.10.7), imported on demand and made usable: it is unmaintained since 2022, and
`import wechaty` works on Python 3.11 only with `pyee==11.1.1`, `urllib3<2` and a patched
`PuppetOptions.__hash__` (docs/wechaty.md). `load_wechaty_sdk` checks the pins and names the wrong
one, applies the patch, imports the few names the adapter uses and routes the SDK's own chatty
stderr loggers into ours at WARNING; `RedactSecret` keeps the puppet token out of every record.
Nothing here imports the SDK until `load_wechaty_sdk` runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from bot.errors import ChannelError

__all__ = ["INSTALL_HINT", "TOKEN_LOGGERS", "RedactSecret", "WechatySdk", "load_wechaty_sdk"]

INSTALL_HINT = (
    "the wechaty channel needs the optional SDK: install memgate[wechaty] in its own virtualenv "
    "(wechaty==0.10.7 with pyee==11.1.1 and urllib3<2; see docs/wechaty.md)"
)
# Loggers the SDK creates with its own stderr handler at INFO (message bodies included).
_SDK_LOGGERS = (
    "Accessory", "Config", "Contact", "ContactSelf", "Favorite", "FileBox", "FriendShip", "Image",
    "Message", "MiniProgram", "PuppetService", "Room", "RoomInvitation", "Tag", "UrlLink", "Wechaty",
    "WechatyPuppet", "WechatyPuppet.Schema.Base", "WechatyPuppet.Schemas.Event",
    "WechatyPuppetServiceConfig", "wechaty.plugin",
)  # fmt: skip
# The token travels as the HTTP/2 :authority header, and hpack logs headers at DEBUG.
TOKEN_LOGGERS = (*_SDK_LOGGERS, "hpack.hpack", "hpack.table")


@dataclass(frozen=True, slots=True)
class WechatySdk:
    """The few SDK names the adapter uses, imported with the compatibility fixes applied."""

    wechaty: Any  # wechaty.Wechaty
    options: Any  # wechaty.WechatyOptions
    puppet_options: Any  # wechaty_puppet.PuppetOptions
    scheduler: Any  # apscheduler AsyncIOScheduler: in memory, unlike the SDK's sqlite default
    errors: tuple[type[BaseException], ...]  # what a failed puppet call raises


def load_wechaty_sdk() -> WechatySdk:
    """Import wechaty 0.10.7 after applying its Python 3.11 fixes; ChannelError when absent."""
    try:
        _check_versions()
        from wechaty_puppet.schemas.puppet import PuppetOptions

        # WechatyOptions has `puppet_options: PuppetOptions = PuppetOptions()`; Python 3.11's
        # dataclasses reject an unhashable default (PuppetOptions is an eq dataclass, so its
        # __hash__ is None) and `import wechaty` fails. Restoring identity hashing is harmless.
        PuppetOptions.__hash__ = object.__hash__  # type: ignore[assignment,method-assign]
        import wechaty_puppet_service  # noqa: F401  (so its logger exists before we tame it)
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
        from wechaty import Wechaty, WechatyOptions
        from wechaty_puppet.exceptions import WechatyPuppetError
    except ImportError as exc:
        raise ChannelError(INSTALL_HINT) from exc
    _tame_sdk_loggers()
    errors = (GRPCError, ProtocolError, StreamTerminatedError, WechatyPuppetError, OSError, TimeoutError)
    return WechatySdk(Wechaty, WechatyOptions, PuppetOptions, AsyncIOScheduler, errors)


def _check_versions() -> None:
    """Fail with the exact pin when the installed pyee or urllib3 would break `import wechaty`."""
    try:
        metadata.version("wechaty")
        pyee, urllib3 = metadata.version("pyee"), metadata.version("urllib3")
    except metadata.PackageNotFoundError as exc:
        raise ChannelError(INSTALL_HINT) from exc
    # pyee 12 dropped the top-level AsyncIOEventEmitter; urllib3 2 dropped get_host.
    if _major(pyee) >= 12 or _major(urllib3) >= 2:
        raise ChannelError(f"{INSTALL_HINT}; found pyee {pyee}, urllib3 {urllib3}")


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _tame_sdk_loggers() -> None:
    """Route the SDK's loggers into ours at WARNING: by default each prints INFO to stderr itself."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.WARNING)


class RedactSecret(logging.Filter):
    """Masks the puppet token: the SDK logs it in a warning whenever end point and token are both
    set, and hpack logs it (as the :authority header) at DEBUG."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if self._secret and self._secret in text:
            record.msg, record.args = text.replace(self._secret, "***"), None
        return True
