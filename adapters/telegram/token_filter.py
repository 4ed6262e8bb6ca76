"""The bot token kept out of the logs: a filter on every logger whose records can quote it
(httpx logs request URLs, which hold the token; python-telegram-bot logs its API URL)."""

from __future__ import annotations

import logging

# Loggers whose records can quote the token (request URLs, "Set Bot API URL", InvalidToken).
# A logger's filter only sees records created on that very logger, hence the full list.
_TOKEN_LOGGERS = (
    "httpx",
    "httpcore.http11",
    "httpcore.connection",
    "telegram",
    "telegram.Bot",
    "telegram.ext",
    "telegram.ext.ExtBot",
    "telegram.ext.Application",
    "telegram.ext.Updater",
    "telegram.ext.AIORateLimiter",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
)


class RedactToken(logging.Filter):
    """Replace the bot token in log records (httpx logs request URLs, which contain it)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def install(self) -> None:
        for name in _TOKEN_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        for name in _TOKEN_LOGGERS:
            logging.getLogger(name).removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's to report, not ours
            return True
        if self._token in message:
            record.msg = message.replace(self._token, "<token>")
            record.args = ()
        return True
