"""Work an event interrupts: a reply the person stops, a memory call a reply takes the model from."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["until_set"]


async def until_set(work: Awaitable[T], event: asyncio.Event) -> asyncio.Task[T]:
    """`work` run until it ends or `event` is set, whichever comes first; its finished task. When
    the event comes first the work is cancelled and awaited (an LLM call in flight is closed, not
    left running), and the task is `cancelled()` unless the work ended meanwhile."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return task
