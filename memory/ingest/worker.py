"""The IngestWorker (DESIGN section 4): drains the durable queue, turning each captured turn
into chunks (with retrieval titles and dedup) and facts (extracted, reconciled, with
provenance). One LLM call per turn (turn_prompt.py) gives titles, dedup, facts, their
reconciliation against the stored facts close to the turn's user messages, and the task
boundary verdict when the task rules cannot place the turn. A second call reconciles facts only
when an extracted fact has close stored facts the first call was not shown. A space with a
backlog sends several queued turns in one call (bounded by `batch_tokens`), each answer applied
to its own turn.

Nothing is lost: a turn leaves the queue only in the transaction that writes its rows (and its
boundary verdict). When the LLM fails, the turn is retried with backoff; past the retry limit it
is stored raw (title = trimmed text), still findable, and marked for fact extraction later. A
batch never changes that: a failed or malformed batched answer sends the turns it concerns
through the single-turn path, with their own retries.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from memory.ingest import facts as F
from memory import prompts
from memory.ingest.capture import TurnMessage, decode_payload
from memory.ingest.turn_prompt import (
    MAX_KNOWN, BatchAnswer, BatchMates, Shown, TurnAnswer, TurnView, folded_decisions, render_batch, render_turn, split_batch,
)
from memory.embed import Embedder
from memory.errors import LLMError
from memory.llm import LLM, charged_to
from memory.store.rows import NewMemory, insert_memories, new_id, utc_naive
from memory.ingest.raw import TITLE_CHARS, RawMessage, embed_text, index_text, raw_rows
from memory.store.connection import Conn, Store
from memory.store.locks import LockSpace, lock_key
from memory.tasks.boundary import TaskGist, gist_for, next_gist, store_verdicts, wants_verdict
from memory.tasks.rules import ChunkInfo, Turn
from memory.text import content_hash, estimate_tokens, normalize, redact, trim
from memory.store.vectors import vector_candidates

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestSettings:
    # E5 puts unrelated texts near 0.72 and paraphrases near 0.9, so DESIGN's 0.80 would send
    # most turns to the judge; these thresholds are calibrated for the local model.
    dedup_threshold: float = 0.93
    fact_candidate_threshold: float = 0.86
    title_min_chars: int = TITLE_CHARS      # shorter messages are their own title (no LLM tokens)
    max_attempts: int = 3
    backoff_seconds: float = 30.0
    workers: int = 4                         # spaces ingested at once
    per_space: int = 16                      # a space's turns per claim (then it queues behind older ones)
    batch_tokens: int = 2000                 # a space's queued turns share one LLM call up to this size
    fold_reconcile: bool = True              # False: close facts always go to the separate reconcile call
    poll_seconds: float = 5.0
    max_facts_per_turn: int = F.MAX_FACTS_PER_TURN


@dataclass
class _Draft:
    msg: TurnMessage
    n: int                                  # 1-based number shown to the LLM
    vector: np.ndarray | None = None
    near: list[tuple[str, str]] = field(default_factory=list)  # (chunk id, text) possible duplicates
    title: str = ""
    chunk_id: str | None = None             # the id its facts point to (new or existing)
    skip: bool = False
    merged_from: tuple[str, str | None] | None = None  # (retired id, its merge history JSON)


@dataclass(frozen=True)
class _Queued:
    """One turn as the queue holds it."""

    qid: str
    space_id: str
    session_id: str | None
    turn_id: str
    messages: list[TurnMessage]
    created_at: datetime
    attempts: int


@dataclass
class _Job:
    """One turn on the LLM path: what its ingest call is shown, and what the next turn of its
    batch sees of the open task."""

    turn: _Queued
    drafts: list[_Draft]
    raws: list[RawMessage]
    needs_title: list[_Draft]
    view: TurnView
    ask_task: bool
    needs_call: bool
    gist_after: TaskGist | None


@dataclass
class IngestStats:
    turns: int = 0
    raw_fallbacks: int = 0
    exact_duplicates: int = 0
    semantic_duplicates: int = 0
    merges: int = 0
    facts_written: int = 0


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
        # Set by whoever assigns tasks after ingest (the task wiring): the ingest call then
        # gives the boundary verdict the task rules cannot, for turns this far apart at most.
        self.task_gap: timedelta | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()   # replaced at each change: a waiter keeps the one it saw
        self.stats = IngestStats()

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Drain leftovers from a previous run, then keep draining in the background."""
        self._stopping = False
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
                            lambda c: next_space_turns(c, now, held | elsewhere, self.settings.per_space))
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
                            lambda c: next_space_turns(c, now, held | elsewhere, self.settings.per_space))
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
                while True:
                    rows = await claim()
                    if not rows:
                        changed = self._changed
                        if not held:
                            return
                        await changed.wait()
                        continue
                    try:
                        for batch in batches(rows, self.settings.batch_tokens):
                            if len(batch) == 1 or self.llm is None:
                                await self._process(*batch[0])
                            else:
                                await self._process_batch(batch)
                    finally:
                        await release(rows[0][1])
                        self._signal_change()
                    done += len(rows)

            await asyncio.gather(*(slot() for _ in range(self.settings.workers)))
            return done

    def _signal_change(self) -> None:
        """Wake the slots waiting for something to claim (a space released, a turn queued)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _process(self, qid: str, space_id: str, session_id: str | None, turn_id: str, payload: str,
                       attempts: int) -> None:
        messages, created_at = decode_payload(payload)
        turn = _Queued(qid, space_id, session_id, turn_id, messages, created_at, attempts)
        await self._settle(turn, lambda: self._process_turn(turn))

    async def _settle(self, turn: _Queued, work: Callable[[], Awaitable[None]]) -> None:
        """Run one turn's ingest; any failure goes to the turn's own retry rules."""
        try:
            with charged_to(turn.space_id):
                await work()
        except LLMError as exc:
            await self._failed(turn, str(exc))
            return
        except Exception as exc:  # a bug or a store error: keep the turn, back off, never lose it
            log.exception("ingest of turn %s failed", turn.turn_id)
            await self._failed(turn, f"{type(exc).__name__}: {exc}")
            return
        self.stats.turns += 1
        if self.on_ingested is not None:
            try:
                await self.on_ingested(turn.space_id)
            except Exception:
                log.exception("post-ingest hook failed for space %s", turn.space_id)

    async def _process_turn(self, turn: _Queued) -> None:
        if self.llm is None:
            await asyncio.to_thread(self._store_raw, turn, False)
            return
        gist = await self._gist(turn.space_id)
        job = await self._prepare(turn, gist)
        answer = TurnAnswer()
        if job.needs_call:
            answer = await self.llm.complete_json(prompts.TURN_SYSTEM, render_turn(job.view, self._clock()),
                                                  TurnAnswer, purpose="ingest")
        await self._finish(job, answer)

    async def _process_batch(self, rows: Sequence[tuple]) -> None:
        """Several queued turns of one space in one LLM call, each answer applied to its turn.

        Turns are prepared in order (the task gist moves on with each), asked together, then
        finished one by one in queue order, each in its own transaction. A turn whose part of
        the answer is missing or malformed, or all of them when the call fails, go through the
        single-turn path (its own call, its own retries): a bad part never costs another turn.
        """
        turns = [_Queued(*r[:4], *decode_payload(r[4]), r[5]) for r in rows]
        jobs: list[_Job] = []
        # The batch's texts go through the model together (one run of batches of 16, not two
        # small runs per turn: 1.5-2.4x the texts per second measured here), then each turn takes its own.
        embed = Embedded(self.embedder.embed_passages)
        try:
            with charged_to(turns[0].space_id):
                await asyncio.to_thread(embed, [t for turn in turns for t in vector_inputs(turn)])
                gist = await self._gist(turns[0].space_id)
                for turn in turns:
                    job = await self._prepare(turn, gist, embed)
                    gist = job.gist_after
                    jobs.append(job)
                asked = [j for j in jobs if j.needs_call]
                parts: list[TurnAnswer | None] = []
                if len(asked) == 1:
                    parts = [await self.llm.complete_json(prompts.TURN_SYSTEM, render_turn(asked[0].view, self._clock()),
                                                          TurnAnswer, purpose="ingest")]
                elif asked:
                    system, user = render_batch([j.view for j in asked], self._clock())
                    parts = split_batch(await self.llm.complete_json(system, user, BatchAnswer, purpose="ingest"),
                                        len(asked))
        except Exception as exc:  # the batch call failed as a whole: every turn on its own
            log.warning("batched ingest of %d turns failed (%s); ingesting them one by one", len(turns),
                        type(exc).__name__)
            for turn in turns:
                await self._settle(turn, lambda turn=turn: self._process_turn(turn))
            return
        answers = dict(zip((id(j) for j in asked), parts))
        number = {id(j): k for k, j in enumerate(asked, start=1)}  # "TURN k" in the prompt
        mates = BatchMates()
        try:
            await asyncio.to_thread(embed, [f.text for a in parts if a is not None for f in a.facts])
        except Exception:  # each turn embeds what is missing itself, under its own retry rules
            log.warning("embedding the batch's facts failed", exc_info=True)
        for job in jobs:
            answer = answers.get(id(job), TurnAnswer()) if job.needs_call else TurnAnswer()
            if answer is None:
                await self._settle(job.turn, lambda job=job: self._process_turn(job.turn))
            else:
                await self._settle(job.turn, lambda job=job, answer=answer: self._finish(
                    job, answer, mates, number.get(id(job), 0), embed))

    async def _failed(self, turn: _Queued, error: str) -> None:
        attempts = turn.attempts + 1
        if attempts >= self.settings.max_attempts:
            log.warning("turn %s failed %d times; storing it raw for later fact extraction", turn.turn_id, attempts)
            self.stats.raw_fallbacks += 1
            await asyncio.to_thread(self._store_raw, turn, True)
            return
        delay = self.settings.backoff_seconds * (2 ** (attempts - 1))
        retry_at = utc_naive(self._clock()) + timedelta(seconds=delay)
        log.warning("ingest of turn %s failed (%s); retry %d in %.0fs", turn.turn_id, error[:200], attempts, delay)
        await self.store.awrite(lambda c: c.execute(
            "UPDATE ingest_queue SET attempts = ?, next_attempt_at = ?, last_error = ? WHERE id = ?",
            [attempts, retry_at, error[:500], turn.qid]))

    # --- raw path --------------------------------------------------------------------------
    def _store_raw(self, turn: _Queued, needs_facts: bool) -> None:
        qid, space_id, session_id = turn.qid, turn.space_id, turn.session_id
        before = self.store.read(lambda c: _previous_message(c, qid, space_id, session_id))
        raws = _raw_messages(space_id, session_id, turn.turn_id, turn.messages, turn.created_at, before)
        # Only this turn's hashes: reading every hash of a large space cost a scan per turn.
        hashes = {r[0] for r in self.store.read(lambda c: c.execute(
            "SELECT content_hash FROM memories WHERE space_id = ? AND kind = 'chunk' AND status = 'active' "
            "AND content_hash IN (SELECT unnest(?))", [space_id, [content_hash(r.text) for r in raws]]).fetchall())}
        raws = [r for r in raws if content_hash(r.text) not in hashes]
        vectors = self.embedder.embed_passages([chunk_text(r) for r in raws])

        def write(con: Conn) -> None:
            insert_memories(con, raw_rows(raws, needs_facts=needs_facts), vectors)
            con.execute("UPDATE ingest_queue SET status = ?, done_at = ?, attempts = attempts + ? WHERE id = ?",
                        ["raw" if needs_facts else "done", utc_naive(self._clock()), int(needs_facts), qid])

        self.store.write(write)

    # --- LLM path --------------------------------------------------------------------------
    async def _gist(self, space_id: str) -> TaskGist | None:
        if self.task_gap is None:
            return None
        return await self.store.aread(lambda c: gist_for(c, space_id))

    async def _prepare(self, turn: _Queued, gist: TaskGist | None, embed: EmbedFn | None = None) -> _Job:
        """Everything before the LLM call: exact and near duplicates, the stored facts close to the
        user's messages, and whether the task rules need the call's boundary verdict."""
        s = self.settings
        space_id, messages = turn.space_id, turn.messages
        drafts = [_Draft(msg=m, n=i) for i, m in enumerate(messages, start=1)]
        # No cross-turn context here: the same vector finds near-duplicates, and the 0.93
        # threshold is calibrated on opening messages embedded alone.
        raws = _raw_messages(space_id, turn.session_id, turn.turn_id, messages, turn.created_at)
        # 1. Exact duplicates: skipped without an LLM call; their facts point at the old chunk.
        existing = dict(await self.store.aread(lambda c: c.execute(
            """SELECT content_hash, any_value(id) FROM memories WHERE space_id = ? AND kind = 'chunk'
               AND status = 'active' AND content_hash IN (SELECT unnest(?)) GROUP BY content_hash""",
            [space_id, [content_hash(m.text) for m in messages]]).fetchall()))
        for d in drafts:
            old = existing.get(content_hash(d.msg.text))
            if old:
                d.skip, d.chunk_id = True, old
                self.stats.exact_duplicates += 1
        live = [d for d in drafts if not d.skip]
        known: list[F.Existing] = []
        if live:
            users = [d for d in live if d.msg.role == "user"]
            texts = [chunk_text(raws[d.n - 1]) for d in live]
            # The user's messages embedded as facts are (nearly) what their facts will be: the
            # stored facts close to them are shown, so the call reconciles as it extracts.
            vecs = await asyncio.to_thread(embed or self.embedder.embed_passages, texts + [d.msg.text for d in users])
            for d, v in zip(live, vecs):
                d.vector = v
            await self.store.aread(lambda c: self._near_duplicates(c, space_id, live))
            if users and s.fold_reconcile:
                probes = [F.ExtractedFact(text=d.msg.text) for d in users]
                known = await self.store.aread(lambda c: F.find_existing(
                    c, space_id, probes, vecs[len(live):], s.fact_candidate_threshold))
        needs_title = [d for d in live if d.msg.role != "tool" and len(d.msg.text) > s.title_min_chars]
        rules_turn = _rules_turn(turn)
        step = wants_verdict(gist, rules_turn, self.task_gap) if self.task_gap is not None else None
        ask_task = step is not None and step.action == "ask"
        view = TurnView(
            created_at=turn.created_at,
            messages=tuple(Shown(d.n, d.msg, d.skip, tuple(t for _, t in d.near)) for d in drafts),
            needs_title=tuple(d.n for d in needs_title),
            known=tuple(known[:MAX_KNOWN]),
            gist=gist if ask_task else None)
        user_live = any(d.msg.role == "user" for d in live)
        return _Job(turn=turn, drafts=drafts, raws=raws, needs_title=needs_title, view=view, ask_task=ask_task,
                    needs_call=bool(user_live or needs_title or any(d.near for d in live) or ask_task),
                    gist_after=next_gist(gist, rules_turn, step) if step is not None else None)

    async def _finish(self, job: _Job, answer: TurnAnswer, mates: BatchMates | None = None, k: int = 0,
                      embed: EmbedFn | None = None) -> None:
        """Everything after the LLM call: dedup, titles, facts (reconciled), one write. In a
        batch, `mates` holds what the call gave for the turns before this one (turn `k`)."""
        s, turn, drafts = self.settings, job.turn, job.drafts
        live = [d for d in drafts if not d.skip]
        self._apply_dedup(live, answer)
        for d in live:
            d.title = trim(answer.titles.get(str(d.n), "") or d.msg.text, TITLE_CHARS if d not in job.needs_title else 200)
        # 2. Facts from user messages only, minus one-off questions.
        new_facts = F.keep_statements([f for f in answer.facts if _from_user(f, drafts)], s.max_facts_per_turn)
        if len(answer.facts) > s.max_facts_per_turn:
            log.warning("turn %s: the memory LLM returned %d facts; kept %d", turn.turn_id, len(answer.facts), len(new_facts))
        shown = mates.shown_with(job.view.known, new_facts) if mates is not None else list(job.view.known)
        plan, decisions = await self._plan_facts(turn.space_id, new_facts, [[] for _ in new_facts], shown, embed)
        verdict = answer.task.as_verdict() if job.ask_task and answer.task is not None else None
        await self.store.awrite(lambda c: self._write(c, job, plan, decisions, verdict))
        if mates is not None and plan is not None:
            mates.record(k, answer.facts, plan)

    async def _plan_facts(self, space_id: str, new_facts: list[F.ExtractedFact], sources: list[list[str]],
                          shown: list[F.Existing] | None = None, embed: EmbedFn | None = None,
                          ) -> tuple[F.FactPlan | None, list[F.Decision] | None]:
        """Embed new facts and find close existing ones. The ingest call's own decisions stand
        when it was shown every close fact (`shown`); otherwise the LLM is asked to reconcile."""
        if not new_facts:
            return None, None
        fvecs = await asyncio.to_thread(embed or self.embedder.embed_passages, [f.text for f in new_facts])
        plan = F.FactPlan(facts=new_facts, vectors=fvecs, sources=sources)
        plan.existing = await self.store.aread(
            lambda c: F.find_existing(c, space_id, new_facts, fvecs, self.settings.fact_candidate_threshold))
        if shown and {e.id for e in plan.existing} <= {e.id for e in shown}:
            plan.existing = shown  # the ids the call answered with
            return plan, folded_decisions(new_facts)
        if not plan.existing:
            return plan, None  # no candidates: every fact is ADD, no LLM call
        rec = await self.llm.complete_json(
            prompts.RECONCILE_SYSTEM,
            prompts.RECONCILE_USER.format(existing=F.render_existing(plan.existing, self._clock()),
                                          new=F.render_new(new_facts)),
            F.ReconcileAnswer, purpose="reconcile")
        return plan, rec.decisions

    def _near_duplicates(self, con: Conn, space_id: str, live: Sequence[_Draft]) -> None:
        for d in live:
            if d.msg.role == "tool":
                continue
            hits = [(i, sim) for i, sim in vector_candidates(con, d.vector, [space_id], 5, ["chunk"])
                    if sim >= self.settings.dedup_threshold]
            if hits:
                texts = dict(con.execute("SELECT id, text FROM memories WHERE id IN (SELECT unnest(?))",
                                         [[i for i, _ in hits]]).fetchall())
                d.near = [(i, texts[i]) for i, _ in hits if i in texts]

    def _apply_dedup(self, live: Sequence[_Draft], answer: TurnAnswer) -> None:
        by_n = {d.n: d for d in live}
        for v in answer.dedup:
            d = by_n.get(v.message)
            if d is None or not d.near or v.target is None or not (1 <= v.target <= len(d.near)):
                continue
            target_id = d.near[v.target - 1][0]
            verdict = v.verdict.upper()
            if verdict == "DUPLICATE":
                d.skip, d.chunk_id = True, target_id
                self.stats.semantic_duplicates += 1
            elif verdict == "UPDATE" and v.merged and v.merged.strip():
                d.merged_from = (target_id, None)
                d.msg = TurnMessage(role=d.msg.role, text=v.merged.strip(), speaker=d.msg.speaker, tool_name=d.msg.tool_name)
                self.stats.merges += 1

    def _write(self, con: Conn, job: _Job, plan, decisions, verdict) -> None:
        turn, drafts, raws = job.turn, job.drafts, job.raws
        qid, space_id, session_id, turn_id, created_at = turn.qid, turn.space_id, turn.session_id, turn.turn_id, turn.created_at
        live = [d for d in drafts if not d.skip]
        rows, vecs, retire = [], [], []
        for d in live:
            raw = raws[d.n - 1]
            d.chunk_id = new_id("c")
            history: list[dict] = []
            if d.merged_from:
                old_id = d.merged_from[0]
                old = con.execute("SELECT text, merge_history, created_at FROM memories WHERE id = ?", [old_id]).fetchone()
                if old:
                    history = (json.loads(old[1]) if old[1] else []) + [
                        {"id": old_id, "text": old[0], "created_at": old[2].isoformat()}]
                    retire.append(old_id)
            rows.append(NewMemory(
                space_id=space_id, kind="chunk", role=d.msg.role, speaker=d.msg.speaker, text=normalize(d.msg.text),
                title=d.title, created_at=raw.created_at, id=d.chunk_id, session_id=session_id, turn_id=turn_id,
                merge_history=tuple(history), index_text=f"{d.title}\n{index_text(d.msg.text, d.msg.speaker, raw.created_at)}",
                hash=content_hash(raws[d.n - 1].text)))
            vecs.append(d.vector)
        if rows:
            insert_memories(con, rows, np.vstack(vecs))
        if retire:
            # The merged chunk replaces the old one: retired, pointing at its successor.
            for d in live:
                if d.merged_from:
                    con.execute("UPDATE memories SET status = 'retired', superseded_by = ?, updated_at = ? WHERE id = ?",
                                [d.chunk_id, utc_naive(created_at), d.merged_from[0]])
        if plan is not None:
            plan.sources = [[drafts[n - 1].chunk_id for n in f.from_ if 1 <= n <= len(drafts) and drafts[n - 1].chunk_id]
                            or [d.chunk_id for d in drafts if d.msg.role == "user" and d.chunk_id]
                            for f in plan.facts]
            ids = F.apply_plan(con, plan, decisions, space_id=space_id, created_at=created_at,
                               embed=lambda t: self.embedder.embed_passages([t])[0])
            self.stats.facts_written += len(ids)
        if verdict is not None:
            store_verdicts(con, space_id, turn_id, verdict, utc_naive(created_at))
        con.execute("UPDATE ingest_queue SET status = 'done', done_at = ? WHERE id = ?", [utc_naive(self._clock()), qid])

    # --- facts for turns stored raw --------------------------------------------------------
    async def extract_pending_facts(self, limit_turns: int = 20) -> int:
        """Extract facts from chunks stored raw after LLM failures; returns turns handled."""
        if self.llm is None:
            return 0
        rows = await self.store.aread(lambda c: c.execute(
            """SELECT space_id, turn_id, array_agg(id ORDER BY created_at), array_agg(text ORDER BY created_at), min(created_at)
               FROM memories WHERE kind = 'chunk' AND needs_facts AND status = 'active'
               GROUP BY space_id, turn_id ORDER BY min(created_at) LIMIT ?""", [limit_turns]).fetchall())
        handled = 0
        for space_id, _turn_id, ids, texts, created_at in rows:
            try:
                with charged_to(space_id):
                    answer = await self.llm.complete_json(
                        prompts.FACTS_ONLY_SYSTEM.format(date=f"{created_at:%Y-%m-%d}"),
                        "\n".join(f"{i}. {redact(t)}" for i, t in enumerate(texts, start=1)),
                        F.FactsAnswer, purpose="ingest")
                new_facts = F.keep_statements(answer.facts, self.settings.max_facts_per_turn)
                plan, decisions = await self._plan_facts(
                    space_id, new_facts,
                    [[ids[n - 1] for n in f.from_ if 1 <= n <= len(ids)] or list(ids) for f in new_facts])
            except LLMError as exc:
                log.warning("fact extraction for stored-raw turn failed again: %s", exc)
                continue

            def write(con: Conn, plan=plan, decisions=decisions, ids=ids, space_id=space_id, created_at=created_at) -> None:
                if plan is not None:
                    self.stats.facts_written += len(F.apply_plan(
                        con, plan, decisions, space_id=space_id, created_at=created_at,
                        embed=lambda t: self.embedder.embed_passages([t])[0]))
                con.execute("UPDATE memories SET needs_facts = false WHERE id IN (SELECT unnest(?))", [list(ids)])

            await self.store.awrite(write)
            handled += 1
        return handled


def _previous_message(con: Conn, qid: str, space_id: str, session_id: str | None) -> TurnMessage | None:
    """The last message of the turn queued before this one in the same session (None across
    sessions): the context of this turn's opening message, as the recall bench embeds it."""
    if session_id is None:
        return None
    row = con.execute(
        """SELECT q.payload FROM ingest_queue q, (SELECT created_at, id FROM ingest_queue WHERE id = ?) me
           WHERE q.space_id = ? AND q.session_id = ?
             AND (q.created_at < me.created_at OR (q.created_at = me.created_at AND q.id < me.id))
           ORDER BY q.created_at DESC, q.id DESC LIMIT 1""", [qid, space_id, session_id]).fetchone()
    if row is None:
        return None
    said = [m for m in decode_payload(row[0])[0] if m.role != "tool"]
    return said[-1] if said else None


def _raw_messages(space_id, session_id, turn_id, messages: Sequence[TurnMessage], created_at: datetime,
                  before: TurnMessage | None = None) -> list[RawMessage]:
    """Chunks of a turn; each carries the message before it (for the first one, `before`: the
    session's previous message) as retrieval context."""
    out = []
    prev: TurnMessage | None = before
    for i, m in enumerate(messages):
        out.append(RawMessage(space_id=space_id, role=m.role, text=m.text, speaker=m.speaker,
                              created_at=created_at + timedelta(milliseconds=i), session_id=session_id,
                              turn_id=turn_id, context=prev.text if prev else None,
                              context_speaker=(prev.speaker or prev.role) if prev else None))
        prev = m
    return out


def _from_user(fact: F.ExtractedFact, drafts: Sequence[_Draft]) -> bool:
    """A fact counts only if it cites at least one user message (or cites nothing in a turn with one)."""
    if not fact.from_:
        return any(d.msg.role == "user" for d in drafts)
    return any(1 <= n <= len(drafts) and drafts[n - 1].msg.role == "user" for n in fact.from_)


def _rules_turn(turn: _Queued) -> Turn:
    """The turn as the task rules will see its chunks (times as stored: naive UTC, 1 ms apart)."""
    at = utc_naive(turn.created_at)
    return Turn(tuple(ChunkInfo(id=f"{turn.turn_id}:{i}", role=m.role, text=m.text, created_at=at + timedelta(milliseconds=i),
                                session_id=turn.session_id, turn_id=turn.turn_id) for i, m in enumerate(turn.messages)))


def batches(rows: Sequence[tuple], budget: int) -> list[list[tuple]]:
    """A space's due rows (queue order) cut into runs that share one LLM call: consecutive
    first attempts whose messages total at most `budget` tokens (estimated). A turn being
    retried goes alone, so its retry count and raw fallback stay its own."""
    out: list[list[tuple]] = []
    size = 0
    for row in rows:
        cost = payload_tokens(row[4])
        if out and row[5] == 0 and out[-1][-1][5] == 0 and size + cost <= budget:
            out[-1].append(row)
            size += cost
        else:
            out.append([row])
            size = cost
    return out


def payload_tokens(payload: str) -> int:
    """Estimated prompt tokens of a queued turn's messages (what batching budgets)."""
    messages, _ = decode_payload(payload)
    return sum(estimate_tokens(m.text[:4000]) + 4 for m in messages)


def next_space_turns(con: Conn, now: datetime, held: Collection[str], limit: int) -> list[tuple]:
    """The next claim: up to `limit` due queue rows, in queue order, of the space whose oldest
    due turn is the oldest among the spaces not in `held` (the ones other slots work on)."""
    return con.execute(
        """WITH due AS (SELECT id, space_id, session_id, turn_id, payload, attempts, created_at FROM ingest_queue
                        WHERE status = 'pending' AND next_attempt_at <= ?
                          AND space_id NOT IN (SELECT unnest(?::VARCHAR[])))
           SELECT id, space_id, session_id, turn_id, payload, attempts FROM due
           WHERE space_id = (SELECT space_id FROM due ORDER BY created_at, id LIMIT 1)
           ORDER BY created_at, id LIMIT ?""",
        [now, sorted(held), limit]).fetchall()


EmbedFn = Callable[[Sequence[str]], np.ndarray]


class Embedded:
    """An embed function that remembers, by text, the vectors it computed: a batch embeds its
    texts in one go, then each turn's lookups are hits (misses are embedded together)."""

    def __init__(self, embed: EmbedFn) -> None:
        self._embed = embed
        self._got: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._got))
        if missing:
            self._got.update(zip(missing, self._embed(missing)))
        if not texts:
            return self._embed(texts)
        return np.vstack([self._got[t] for t in texts])


def chunk_text(raw: RawMessage) -> str:
    """What a message's chunk vector is computed from (the message with its context)."""
    return embed_text(raw.text, raw.speaker, raw.context, raw.context_speaker)


def vector_inputs(turn: _Queued) -> list[str]:
    """Every text `_prepare` may embed for a turn: its chunks, and its user messages as fact probes."""
    raws = _raw_messages(turn.space_id, turn.session_id, turn.turn_id, turn.messages, turn.created_at)
    return [chunk_text(r) for r in raws] + [m.text for m in turn.messages if m.role == "user"]
