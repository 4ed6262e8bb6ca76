"""The gateway's conversation queues: one FIFO queue per conversation, drained by one worker task
that exists only while the conversation has messages, so a conversation has one turn in flight
and many conversations run in parallel.

A turn whose store cannot be written (disk full) is parked with everything queued behind it, in
order; the person is told once per held message, and the parked messages go back to the front
of their queue every `retry_every` seconds until the store takes them. Nothing is dropped here:
every entry is already in the durable inbox, and a turn that fails on a bug stays pending there
for the next run.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from bot.delivery.inbox import InboxEntry
from bot.errors import StoreWriteError

log = logging.getLogger(__name__)


class ConversationQueues:
    """Per-conversation FIFO queues and their workers; `process` runs one entry's turn."""

    def __init__(self, process: Callable[[InboxEntry], Awaitable[None]], *,
                 held: Callable[[InboxEntry], Awaitable[None]], retry_every: float) -> None:
        self._process = process
        self._held = held                 # told for each entry a full store holds back
        self.retry_every = retry_every
        self._queues: dict[str, deque[InboxEntry]] = {}
        self._workers: dict[str, asyncio.Task] = {}
        # Conversations whose messages wait for the store to be writable again, in order.
        self._parked: dict[str, deque[InboxEntry]] = {}
        self._retry_task: asyncio.Task | None = None
        self.running = False              # workers start only once the gateway runs

    def waiting(self, key: str) -> int:
        """Messages of one conversation not yet answered here: queued and held back."""
        return len(self._queues.get(key, ())) + len(self._parked.get(key, ()))

    def put(self, entry: InboxEntry) -> None:
        """Queue a newly accepted message (behind what a full store holds back, if anything)."""
        key = entry.message.conversation_key
        parked = self._parked.get(key)
        if parked is not None:
            parked.append(entry)
            return
        self._queues.setdefault(key, deque()).append(entry)
        if self.running:
            self._spawn(key)

    def adopt(self, entry: InboxEntry) -> None:
        """Queue a pending message found in the inbox, unless it is queued or its conversation is in work."""
        key = entry.message.conversation_key
        queue = self._queues.setdefault(key, deque())
        if all(e.seq != entry.seq for e in queue) and key not in self._workers:
            queue.append(entry)

    def wake(self, keys: list[str]) -> None:
        """Start the workers of these conversations (when running)."""
        if self.running:
            for key in keys:
                self._spawn(key)

    def start(self) -> None:
        """Run: a worker for every conversation with messages, and the retry of what is held back."""
        self.running = True
        for key in list(self._queues):
            self._spawn(key)
        self._retry_task = asyncio.create_task(self._retry_parked(), name="gateway-storage-retry")

    async def stop(self, timeout: float) -> None:
        """Stop retrying; let the turns in work finish within `timeout`, then cancel the rest."""
        if self._retry_task is not None:
            self._retry_task.cancel()
            await asyncio.gather(self._retry_task, return_exceptions=True)
        if self._workers:
            done, pending = await asyncio.wait(list(self._workers.values()), timeout=timeout)
            for t in pending:
                t.cancel()

    async def idle(self) -> None:
        """Wait until every conversation queue is empty (tests, benchmarks)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    def _spawn(self, key: str) -> None:
        if key not in self._workers and self._queues.get(key):
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"conversation:{key}")

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                entry = queue.popleft()
                try:
                    await self._process(entry)
                except StoreWriteError as exc:
                    # Nothing is lost: the message stays pending in the inbox and is processed again
                    # once the store is writable; the person is told why the answer waits.
                    log.error("turn in %s held back, the store cannot be written: %s", key, exc)
                    parked = self._parked.setdefault(key, deque())
                    parked.append(entry)
                    parked.extend(queue)
                    queue.clear()
                    for waiting in parked:
                        await self._held(waiting)
                except Exception:
                    # A bug: the message stays pending in the inbox (the next run tries it again).
                    log.exception("processing a message in %s failed", key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def _retry_parked(self) -> None:
        while True:
            await asyncio.sleep(self.retry_every)
            for key in list(self._parked):
                if key in self._workers:
                    continue
                entries = self._parked.pop(key)
                queue = self._queues.setdefault(key, deque())
                queue.extendleft(reversed(entries))
                self._spawn(key)
