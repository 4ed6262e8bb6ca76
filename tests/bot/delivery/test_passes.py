"""The background loop the outbox and reminder delivery share (bot/delivery/passes.py)."""

from __future__ import annotations

import asyncio

from bot.delivery.passes import PassLoop


class Passes(PassLoop):
    """Counts its passes; the first is woken while it runs (something queued after it looked)."""

    def __init__(self, poll: float = 3600.0) -> None:
        super().__init__("test", poll=poll)
        self.passes = 0
        self.second = asyncio.Event()

    async def one_pass(self) -> float:
        self.passes += 1
        if self.passes == 1:
            self.wake()
        else:
            self.second.set()
        return 3600.0


async def test_a_wake_during_a_pass_starts_the_next_pass_at_once():
    loop = Passes()
    await loop.start()
    try:
        await asyncio.wait_for(loop.second.wait(), 60)   # not after the pass's hour of sleep
    finally:
        await loop.stop()
    assert not loop.running


async def test_a_failed_pass_is_logged_and_the_loop_goes_on(caplog):
    class Failing(Passes):
        async def one_pass(self) -> float:
            self.passes += 1
            if self.passes == 1:
                raise RuntimeError("the store went away")
            self.second.set()
            return 3600.0

    loop = Failing(poll=0.05)   # a failed pass is tried again after `poll`
    await loop.start()
    try:
        await asyncio.wait_for(loop.second.wait(), 60)
    finally:
        await loop.stop()
    assert "test: a delivery pass failed" in caplog.text
