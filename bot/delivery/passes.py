"""A background loop of passes, woken early: what the outbox and reminder delivery share.

A pass looks at what is due and does it; then the loop sleeps the seconds the pass returned (at
least 50 ms), or less when `wake` is called (something was queued, also while the pass ran). A pass that fails is logged
and tried again after `poll` seconds: the loop itself never ends but by `stop`.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

__all__ = ["PassLoop"]


class PassLoop:
    """Runs `one_pass` (a subclass's) in a task from `start` to `stop`."""

    def __init__(self, name: str, poll: float) -> None:
        self.loop_name = name
        self._poll = poll
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    async def one_pass(self) -> float:
        """Do what is due now; the seconds until the next look."""
        raise NotImplementedError

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self.loop_name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def wake(self) -> None:
        """Look again now."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            wait = self._poll
            # Cleared before the pass, not after: a wake while it runs (a reply or a reminder queued
            # after it looked) makes the next pass start at once instead of after the sleep.
            self._wake.clear()
            try:
                wait = await self.one_pass()
            except Exception:
                log.exception("%s: a delivery pass failed", self.loop_name)
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.05, wait))
            except TimeoutError:
                pass
