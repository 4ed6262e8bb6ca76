"""until_set: the model gate's preemption and a reply the person stops share it (memory/interrupt.py)."""

from __future__ import annotations

import asyncio

from memory.interrupt import until_set


async def test_the_work_that_ends_first_gives_its_result_and_the_event_is_not_waited_for():
    event = asyncio.Event()

    async def work() -> str:
        return "done"

    task = await until_set(work(), event)
    assert not task.cancelled() and task.result() == "done"


async def test_the_event_set_first_cancels_the_work_and_waits_for_its_cleanup():
    event, started, cleaned = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def work() -> str:
        started.set()
        try:
            await asyncio.Event().wait()     # a call that does not end by itself
        finally:
            await asyncio.sleep(0)           # its cleanup takes a turn of the loop
            cleaned.set()
        return "never"

    async def stop_it() -> None:
        await started.wait()
        event.set()

    stopper = asyncio.ensure_future(stop_it())
    task = await until_set(work(), event)
    await stopper
    assert task.cancelled() and cleaned.is_set()


async def test_the_caller_cancelled_cancels_the_work_too():
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    outer = asyncio.ensure_future(until_set(work(), asyncio.Event()))
    await started.wait()
    outer.cancel()
    await asyncio.gather(outer, return_exceptions=True)
    assert outer.cancelled() and cleaned.is_set()
