"""Channel trouble the owner must hear about: a lost login, replies the platform refuses.

An adapter that meets such trouble calls `TroubleNotices.report(hook, kind, text)`; the hook
is wired by the composition root (bot.app: the gateway's notify_owner). Notices are throttled
per kind, so a platform refusing every reply does not flood the owner, and a notice that
itself fails (the owner is reached through the channel in trouble) never raises another.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable

from bot.channel import TroubleHook

__all__ = ["TROUBLE_REPEAT_S", "TroubleHook", "TroubleNotices"]

log = logging.getLogger(__name__)

TROUBLE_REPEAT_S = 3600.0  # the same kind of trouble is told again after this long at most once

# Set while a notice is being delivered: a send failing inside it must not report again.
_REPORTING: contextvars.ContextVar[bool] = contextvars.ContextVar("memgate_trouble_reporting", default=False)


class TroubleNotices:
    """Throttled owner notices of one channel."""

    def __init__(self, channel: str, *, repeat_after: float = TROUBLE_REPEAT_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._channel = channel
        self._repeat_after = repeat_after
        self._monotonic = monotonic
        self._last: dict[str, float] = {}

    async def report(self, hook: TroubleHook | None, kind: str, text: str, *, throttle: bool = True) -> bool:
        """Tell the owner `text` through `hook`; False when nothing was sent.

        Nothing is sent without a hook, from inside another notice's delivery, or (with
        `throttle`) when the same `kind` was told less than `repeat_after` seconds ago.
        """
        if hook is None or _REPORTING.get():
            return False
        now = self._monotonic()
        last = self._last.get(kind)
        if throttle and last is not None and now - last < self._repeat_after:
            log.debug("%s: trouble %s already told to the owner", self._channel, kind)
            return False
        self._last[kind] = now
        token = _REPORTING.set(True)
        try:
            await hook(text)
        except Exception:  # a broken notice path must not break the channel
            log.exception("%s: telling the owner about %s failed", self._channel, kind)
        finally:
            _REPORTING.reset(token)
        return True
