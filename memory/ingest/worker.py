"""The IngestWorker (DESIGN section 4): drains the durable queue, turning each captured turn
into chunks (with retrieval titles and dedup) and facts (extracted, reconciled, with
provenance). One LLM call per turn (turn_prompt.py) gives titles, dedup, facts, their
reconciliation against the stored facts close to the turn's user messages, and the task
boundary verdict when the task rules cannot place the turn. A second call reconciles facts only
when an extracted fact has close stored facts the first call was not shown. A space with a
backlog sends several queued turns in one call (bounded by `batch_tokens`), each answer applied
to its own turn.

This module is the queue's side: which turns go when (one space's turns in order, spaces in
parallel), how a backlog shares calls, retries and the raw fallback. What one turn becomes is
turns.py; the queue's SQL is queue.py.

Nothing is lost: a turn leaves the queue only in the transaction that writes its rows (and its
boundary verdict). A model that answers badly is asked for less (turn_call.py: one turn instead
of a batch, the facts alone) and, if even that is unusable, the turn is stored raw at once (title
= trimmed text), still findable, and marked for fact extraction later. A model that cannot be
reached is an outage: the turn is retried with backoff and stored raw past the retry limit. A
batch never changes that: a failed or malformed batched answer sends the turns it concerns
through the single-turn path, with their own retries; after a batch that gave nothing, the next
batches are smaller (halved, back up after one that worked), so a small model's backlog does not
fail one big call after another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from memory.embed import Embedder
from memory.errors import LLMError, ModelStopped
from memory.ingest.capture import decode_payload
from memory.ingest.queue import AlreadyIngested, QueuedTurn, batches, next_space_turns
from memory.ingest.settings import IngestSettings, IngestStats
from memory.ingest.turn_call import ask_batch, ask_turn
from memory.ingest.turn_prompt import BatchMates, TurnAnswer
from memory.ingest.turns import Embedded, TurnIngest, TurnJob
from memory.llm import LLM, charged_to
from memory.llm_json import UnusableAnswer
from memory.store.connection import Store
from memory.store.locks import LockSpace, lock_key
from memory.store.rows import utc_naive

log = logging.getLogger(__name__)

GROWTH = 4            # a space's claim (and its batches' token budget) grows up to this many times


class IngestWorker:
    """Turns queued turns into memories; runs in the background of the gateway."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM | None, *,
                 clock: Callable[[], datetime] | None = None, settings: IngestSettings | None = None,
                 on_ingested: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.settings = settings or IngestSettings()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.on_ingested = on_ingested
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        # The model refused a call because memgate is stopping (ModelStopped): no turn is tried
        # again in this run; the queue keeps them for the next start.
        self._halted = False
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()   # replaced at each change: a waiter keeps the one it saw
        self._touched: set[str] = set()   # spaces of the claims running that wrote a turn
        self._due = 0                     # turns due for ingest (see `backlog`)
        self._progress = asyncio.Event()  # replaced whenever a turn leaves the due backlog
        self._progress_at = float("-inf")  # loop time of the last turn ingested
        self.stats = IngestStats()
        self.turns = TurnIngest(store, embedder, llm, self.settings, self.stats, self._clock)
        # The tokens a batch may hold now: halved after a batch that gave nothing, doubled back
        # (up to the setting) after one that worked.
        self.batch_tokens = self.settings.batch_tokens

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Drain leftovers from a previous run, then keep draining in the background."""
        self._stopping = self._halted = False
        self._progress_at = asyncio.get_running_loop().time()  # a worker just started is not stalled
        self._task = asyncio.create_task(self._run(), name="ingest-worker")

    async def stop(self, *, drain: bool = True, timeout: float = 30.0) -> None:
        """Stop the loop; with `drain`, first ingest what is due (bounded by `timeout`)."""
        self._stopping = True
        self._wake.set()
        if self._task:
            try:
                await asyncio.wait_for(self._task, timeout=timeout)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        if drain:
            try:
                await asyncio.wait_for(self.drain(), timeout=timeout)
            except TimeoutError:
                log.warning("ingest drain timed out; the queue keeps the rest for the next start")

    def notify(self) -> None:
        """A turn was queued: wake the loop, and the slots of a drain waiting for work."""
        self._due += 1
        self._wake.set()
        self._signal_change()

    async def _run(self) -> None:
        while not self._stopping:
            # Clear before draining: a notify() that arrives during the drain must wake us again.
            self._wake.clear()
            try:
                await self.drain()
            except Exception:
                log.exception("ingest loop error; retrying later")
            if self._stopping:
                break
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.poll_seconds)
            except TimeoutError:
                pass

    # --- the queue -------------------------------------------------------------------------
    async def drain(self) -> int:
        """Ingest every due turn; returns how many were processed.

        `workers` slots run at once (the LLM calls are what takes the time). Each claims the
        space whose oldest due turn is the oldest among the spaces no other slot holds, takes
        up to `per_space` of that space's due turns in queue order, ingests them (sharing LLM
        calls up to `batch_tokens`) and claims again. So a space's turns go one after another,
        in order, so that a turn's facts are reconciled against what the turn before it stored;
        different spaces go in parallel; and a space that waited has its queued turns share a
        call. A slot with nothing to claim waits while others work (what they release, and
        turns queued meanwhile, may be its next claim); the drain ends when no slot works.
        """
        if self._halted:
            return 0
        async with self._lock:
            held: set[str] = set()
            claiming = asyncio.Lock()
            done = 0

            shared = self.store.backend != "duckdb"

            async def claim() -> list[tuple]:
                async with claiming:
                    elsewhere: set[str] = set()  # spaces another process is ingesting
                    while True:
                        now = utc_naive(self._clock())
                        rows = await self.store.aread(
                            lambda c: next_space_turns(c, now, held | elsewhere, self._claim_limit()))
                        if rows:
                            self._due = int(rows[0][6])
                        if not rows or not shared:
                            break
                        # Several processes on one database: a space is ingested by the holder of
                        # its lock (gone with a dead process), and read again once held, so what
                        # another process finished before letting go is not ingested twice.
                        space = rows[0][1]
                        if not await asyncio.to_thread(self.store.locks.try_hold, LockSpace.INGEST, lock_key(space)):
                            elsewhere.add(space)
                            continue
                        rows = await self.store.aread(
                            lambda c: next_space_turns(c, now, held | elsewhere, self._claim_limit()))
                        if rows and rows[0][1] == space:
                            break
                        await asyncio.to_thread(self.store.locks.release, LockSpace.INGEST, lock_key(space))
                    if rows:
                        held.add(rows[0][1])
                    return rows

            async def release(space: str) -> None:
                held.discard(space)
                if shared:
                    await asyncio.to_thread(self.store.locks.release, LockSpace.INGEST, lock_key(space))

            async def slot() -> None:
                nonlocal done
                while not self._halted:
                    rows = await claim()
                    if not rows:
                        changed = self._changed
                        if not held:
                            return
                        await changed.wait()
                        continue
                    space = rows[0][1]
                    try:
                        if self.llm is None:  # raw memory: the whole claim at once (it took only its first turn)
                            await self._process_raw(rows)
                        else:
                            for batch in batches(rows, self._batch_budget(len(rows))):
                                if self._halted:
                                    break
                                if len(batch) == 1:
                                    await self._process(*batch[0][:6])
                                else:
                                    await self._process_batch(batch)
                        await self._after_claim(space)
                    finally:
                        self._touched.discard(space)
                        await release(space)
                        self._signal_change()
                    done += len(rows)

            await asyncio.gather(*(slot() for _ in range(self.settings.workers)))
            return done

    def _claim_limit(self) -> int:
        """A claim takes up to `per_space` turns, and up to GROWTH times that from a space with a
        backlog: its queued turns become bigger batches (`_batch_budget`), not a longer queue."""
        return self.settings.per_space * GROWTH

    def _batch_budget(self, claimed: int) -> int:
        """The tokens one call may carry grow with the claim: `batch_tokens` for up to
        `per_space` turns, up to GROWTH times that for a space GROWTH times as far behind."""
        return self.batch_tokens * max(1, min(GROWTH, -(-claimed // self.settings.per_space)))

    # --- the reply path's side: memory keeps up --------------------------------------------
    async def room(self) -> None:
        """Wait while memory is behind: more than `backlog_max` turns due while ingest makes
        progress. The reply path calls this before a turn, so under sustained load replies
        leave memory the share it needs instead of queueing turns faster than they are
        ingested; a stalled ingest (no turn done for `stall_seconds` since the last one or the
        start: the memory model down, a bug) never holds replies back, and neither does a
        worker that is not running."""
        limit, stall = self.settings.backlog_max, self.settings.stall_seconds
        if not limit or self._halted or self._task is None or self._task.done():
            return
        loop = asyncio.get_running_loop()
        while (self._due > limit and not (self._stopping or self._halted)
               and (left := self._progress_at + stall - loop.time()) > 0):
            progressed = self._progress
            try:
                await asyncio.wait_for(progressed.wait(), left)
            except TimeoutError:
                return

    @property
    def backlog(self) -> int:
        """The turns due for ingest, as last counted (a claim counts them; queued and done
        turns move it in between)."""
        return self._due

    def _signal_change(self) -> None:
        """Wake the slots waiting for something to claim (a space released, a turn queued)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _process(self, qid: str, space_id: str, session_id: str | None, turn_id: str, payload: str,
                       attempts: int) -> None:
        messages, created_at = decode_payload(payload)
        turn = QueuedTurn(qid, space_id, session_id, turn_id, messages, created_at, attempts)
        await self._settle(turn, lambda: self._process_turn(turn))

    async def _process_raw(self, rows: Sequence[tuple]) -> None:
        """A claim's turns stored raw together (no LLM); if that fails (one of them written by
        another process meanwhile, a store error), each on its own rules."""
        turns = [QueuedTurn(*r[:4], *decode_payload(r[4]), r[5]) for r in rows]
        try:
            await asyncio.to_thread(self.turns.store_raw_many, turns, False)
        except Exception:
            log.warning("storing %d turns raw together failed; one by one", len(turns), exc_info=True)
            for turn in turns:
                await self._settle(turn, lambda turn=turn: self._process_turn(turn))
            return
        for turn in turns:
            await self._settled(turn)

    async def _settle(self, turn: QueuedTurn, work: Callable[[], Awaitable[None]]) -> None:
        """Run one turn's ingest; any failure goes to the turn's own retry rules."""
        try:
            with charged_to(turn.space_id):
                await work()
        except AlreadyIngested:
            log.info("turn %s was ingested by another process meanwhile; not written twice", turn.turn_id)
            self._left_backlog()
            return
        except ModelStopped:
            self._halt(turn)
            return
        except UnusableAnswer as exc:  # asked for less already: another try a minute later gets the same
            log.warning("turn %s: %s; storing it raw for later fact extraction", turn.turn_id, exc)
            try:
                await asyncio.to_thread(self.turns.store_raw, turn, True)
            except AlreadyIngested:
                log.info("turn %s was ingested by another process meanwhile; not written twice", turn.turn_id)
                return
            self.stats.raw_fallbacks += 1
            return
        except LLMError as exc:
            await self._failed(turn, str(exc))
            return
        except Exception as exc:  # a bug or a store error: keep the turn, back off, never lose it
            log.exception("ingest of turn %s failed", turn.turn_id)
            await self._failed(turn, f"{type(exc).__name__}: {exc}")
            return
        await self._settled(turn)

    async def _settled(self, turn: QueuedTurn) -> None:
        self.stats.turns += 1
        self._touched.add(turn.space_id)
        self._progress_at = asyncio.get_running_loop().time()
        self._left_backlog()

    def _left_backlog(self) -> None:
        """A turn is no longer due (ingested, or waiting for its retry): wake the replies waiting."""
        self._due = max(0, self._due - 1)
        self._progress.set()
        self._progress = asyncio.Event()

    async def _after_claim(self, space: str) -> None:
        """The post-ingest hook (task assignment) once per claim, not once per turn: it takes
        every turn of the space written so far, and per turn it cost three more round trips."""
        if self.on_ingested is None or space not in self._touched:
            return
        try:
            await self.on_ingested(space)
        except Exception:
            log.exception("post-ingest hook failed for space %s", space)

    async def _process_turn(self, turn: QueuedTurn) -> None:
        if self.llm is None:
            await asyncio.to_thread(self.turns.store_raw, turn, False)
            return
        job = await self.turns.prepare(turn)
        await self._ask_and_finish(job)

    async def _ask_and_finish(self, job: TurnJob, mates: BatchMates | None = None, k: int = 0, embed=None) -> None:
        """One turn's own ingest call (narrowed if need be, turn_call.ask_turn), then its rows."""
        answer = TurnAnswer()
        if job.needs_call:
            answer = await ask_turn(self.llm, job.view, self._clock(), max_facts=self.settings.max_facts_per_turn)
        await self.turns.finish(job, answer, mates, k, embed)

    async def _process_batch(self, rows: Sequence[tuple]) -> None:
        """Several queued turns of one space in one LLM call, each answer applied to its turn.

        Turns are prepared in order (the task gist moves on with each), asked together, then
        finished one by one in queue order, each in its own transaction. A turn whose part of
        the answer is missing or malformed, or all of them when the call fails, go through the
        single-turn path (its own call, its own retries): a bad part never costs another turn.
        """
        turns = [QueuedTurn(*r[:4], *decode_payload(r[4]), r[5]) for r in rows]
        jobs: list[TurnJob] = []
        asked: list[TurnJob] = []
        # The batch's texts go through the model together (one run of batches of 16, not two
        # small runs per turn: 1.5-2.4x the texts per second measured here), then each turn takes its own.
        embed = Embedded(self.embedder.embed_passages)
        try:
            with charged_to(turns[0].space_id):
                jobs = await asyncio.to_thread(self.turns.prepare_run, turns, embed)
                asked = [j for j in jobs if j.needs_call]
                parts: list[TurnAnswer | None] = []
                if len(asked) > 1:
                    parts = await ask_batch(self.llm, [j.view for j in asked], self._clock(),
                                            max_facts=self.settings.max_facts_per_turn)
        except ModelStopped:
            self._halt(turns[0])
            return
        except Exception as exc:  # the batch call failed as a whole: every turn on its own
            log.warning("batched ingest of %d turns failed (%s: %s); ingesting them one by one", len(turns),
                        type(exc).__name__, str(exc)[:300])
            self.batch_tokens = max(1, self.batch_tokens // 2)
            for turn in turns:
                await self._settle(turn, lambda turn=turn: self._process_turn(turn))
            return
        if len(asked) > 1 and all(p is None for p in parts):
            log.warning("batched ingest of %d turns gave no usable part; ingesting them one by one", len(turns))
            self.batch_tokens = max(1, self.batch_tokens // 2)
        elif len(asked) > 1:
            self.batch_tokens = min(self.settings.batch_tokens, self.batch_tokens * 2)
        answers = dict(zip((id(j) for j in asked), parts))
        number = {id(j): k for k, j in enumerate(asked, start=1)}  # "TURN k" in the prompt
        mates = BatchMates()
        try:
            await asyncio.to_thread(embed, [f.text for a in parts if a is not None for f in a.facts])
        except Exception:  # each turn embeds what is missing itself, under its own retry rules
            log.warning("embedding the batch's facts failed", exc_info=True)
        for job in jobs:
            answer = answers.get(id(job), TurnAnswer()) if job.needs_call else TurnAnswer()
            if len(asked) == 1 and job is asked[0]:  # the one turn that needs the model: its own call
                await self._settle(job.turn, lambda job=job: self._ask_and_finish(
                    job, mates, number.get(id(job), 0), embed))
            elif answer is None:
                await self._settle(job.turn, lambda job=job: self._process_turn(job.turn))
            else:
                await self._settle(job.turn, lambda job=job, answer=answer: self.turns.finish(
                    job, answer, mates, number.get(id(job), 0), embed))

    def _halt(self, turn: QueuedTurn) -> None:
        """Stopping: the turn (and the rest of its claim) stays queued as it is, no attempt counted."""
        if not self._halted:
            log.info("memgate is stopping: turn %s and the rest of the queue wait for the next start", turn.turn_id)
        self._halted = True

    async def _failed(self, turn: QueuedTurn, error: str) -> None:
        self._left_backlog()
        attempts = turn.attempts + 1
        if attempts >= self.settings.max_attempts:
            log.warning("turn %s failed %d times; storing it raw for later fact extraction", turn.turn_id, attempts)
            self.stats.raw_fallbacks += 1
            await asyncio.to_thread(self.turns.store_raw, turn, True)
            return
        delay = self.settings.backoff_seconds * (2 ** (attempts - 1))
        retry_at = utc_naive(self._clock()) + timedelta(seconds=delay)
        log.warning("ingest of turn %s failed (%s); retry %d in %.0fs", turn.turn_id, error[:200], attempts, delay)
        await self.store.awrite(lambda c: c.execute(
            "UPDATE ingest_queue SET attempts = ?, next_attempt_at = ?, last_error = ? WHERE id = ?",
            [attempts, retry_at, error[:500], turn.qid]))

    @property
    def task_gap(self) -> timedelta | None:
        """Set by the task wiring: the ingest call gives the boundary verdict the task rules cannot
        for turns at most this far apart (None: no verdicts asked)."""
        return self.turns.task_gap

    @task_gap.setter
    def task_gap(self, gap: timedelta | None) -> None:
        self.turns.task_gap = gap

    async def extract_pending_facts(self, limit_turns: int = 20) -> int:
        """Extract facts from chunks stored raw after LLM failures; returns turns handled."""
        return await self.turns.extract_pending_facts(limit_turns)
