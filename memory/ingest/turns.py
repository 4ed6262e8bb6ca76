"""One queued turn into memory rows: its chunks (exact and near duplicates, retrieval titles)
and its facts (extracted, reconciled, with provenance), before and after the ingest call, and
written in one transaction with the queue row marked done. Also the raw path (no LLM: chunks
titled by their own text) and the later fact extraction for turns stored raw.

The worker (worker.py) decides which turns go when and how they share calls; this module does
what one turn needs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from memory import prompts
from memory.embed import Embedder
from memory.errors import LLMError
from memory.ingest import facts as F
from memory.ingest.capture import TurnMessage
from memory.ingest.queue import QueuedTurn, claim_done, previous_message
from memory.ingest.raw import TITLE_CHARS, RawMessage, embed_text, index_text, raw_rows
from memory.ingest.settings import IngestSettings, IngestStats
from memory.ingest.turn_prompt import MAX_KNOWN, Ask, BatchMates, Shown, TurnAnswer, TurnView, folded_decisions
from memory.llm import LLM, charged_to
from memory.llm_json import complete_json
from memory.store.connection import Conn, Store
from memory.store.postings_cache import postings_for
from memory.store.rows import NewMemory, insert_memories, new_id, utc_naive
from memory.store.vectors import cache_for
from memory.tasks.boundary import TaskGist, gist_for, next_gist, store_verdicts, wants_verdict
from memory.tasks.rules import MISSING_VERDICT, ChunkInfo, Turn
from memory.redaction import redact
from memory.text import content_hash, normalize, trim

log = logging.getLogger(__name__)


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


@dataclass
class TurnJob:
    """One turn on the LLM path: what its ingest call is shown, and what the next turn of its
    batch sees of the open task."""

    turn: QueuedTurn
    drafts: list[_Draft]
    raws: list[RawMessage]
    needs_title: list[_Draft]
    view: TurnView
    ask_task: bool
    needs_call: bool
    gist_after: TaskGist | None


class TurnIngest:
    """What one turn's ingest does, shared by the single-turn and the batched paths."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM | None, settings: IngestSettings,
                 stats: IngestStats, clock: Callable[[], datetime]) -> None:
        self.store, self.embedder, self.llm = store, embedder, llm
        self.settings, self.stats, self._clock = settings, stats, clock
        # Set by whoever assigns tasks after ingest (the task wiring): the ingest call then
        # gives the boundary verdict the task rules cannot, for turns this far apart at most.
        self.task_gap: timedelta | None = None

    def _candidates(self, con: Conn, qvec: np.ndarray, space_ids: Sequence[str], n: int,
                    kinds: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """The nearest rows, from the store's vector cache: the rows the SQL scan gives, without
        reading every vector of the table's row groups (the spaces of busy chats are spread over
        all of them: four such scans a turn grew with the table and took most of ingest's CPU)."""
        return cache_for(self.store).candidates(con, qvec, space_ids, n, kinds)

    # --- stored without the LLM --------------------------------------------------------------------------
    def store_raw(self, turn: QueuedTurn, needs_facts: bool) -> None:
        self.store_raw_many([turn], needs_facts)

    def store_raw_many(self, turns: Sequence[QueuedTurn], needs_facts: bool) -> None:
        """Turns of one space stored raw (in queue order) with one embedding run and one write:
        per turn, two reads, a model call of two texts and a commit cost more than its texts."""
        space_id = turns[0].space_id
        raws: list[RawMessage] = []
        for turn in turns:
            before = self.store.read(lambda c, t=turn: previous_message(c, t.qid, t.space_id, t.session_id))
            raws += _raw_messages(space_id, turn.session_id, turn.turn_id, turn.messages, turn.created_at, before)
        # Only these turns' hashes: reading every hash of a large space cost a scan per turn.
        hashes = {r[0] for r in self.store.read(lambda c: c.execute(
            "SELECT content_hash FROM memories WHERE space_id = ? AND kind = 'chunk' AND status = 'active' "
            "AND content_hash IN (SELECT unnest(?))", [space_id, [content_hash(r.text) for r in raws]]).fetchall())}
        kept = []
        for r in raws:  # an exact duplicate, stored before or earlier in these turns, is skipped
            h = content_hash(r.text)
            if h not in hashes:
                hashes.add(h)
                kept.append(r)
        vectors = self.embedder.embed_passages([chunk_text(r) for r in kept])
        done_at = utc_naive(self._clock())

        def write(con: Conn) -> None:
            for t in turns:  # first: a turn another process wrote meanwhile rolls this back
                claim_done(con, t.qid, "raw" if needs_facts else "done", done_at, int(needs_facts))
            insert_memories(con, raw_rows(kept, needs_facts=needs_facts), vectors)

        self.store.write(write)
        if kept:  # the space's vector file, built before its first question (issue 33)
            cache_for(self.store).written([space_id], len(kept))

    # --- LLM path --------------------------------------------------------------------------
    def prepare_run(self, turns: Sequence[QueuedTurn], embed: EmbedFn | None = None) -> list[TurnJob]:
        """`prepare` for a run of one space's turns, in queue order, blocking (one thread hop for
        the whole run: its texts embedded together, then every lookup on one cursor). The task
        gist moves on from turn to turn as the rules place them."""
        if not turns:
            return []
        embed = embed or Embedded(self.embedder.embed_passages)
        embed([t for turn in turns for t in vector_inputs(turn)])  # one run of the model for all of them
        space_id = turns[0].space_id

        def read(con: Conn) -> list[TurnJob]:
            gist = gist_for(con, space_id) if self.task_gap is not None else None
            jobs = []
            for turn in turns:
                job = self._prepare(con, turn, gist, embed)
                gist = job.gist_after
                jobs.append(job)
            return jobs

        return self.store.read(read)

    async def prepare(self, turn: QueuedTurn) -> TurnJob:
        """Everything before the LLM call for one turn (see `_prepare`)."""
        return (await asyncio.to_thread(self.prepare_run, [turn]))[0]

    def _prepare(self, con: Conn, turn: QueuedTurn, gist: TaskGist | None, embed: EmbedFn) -> TurnJob:
        """Everything before the LLM call: exact and near duplicates, the stored facts close to the
        user's messages, and whether the task rules need the call's boundary verdict."""
        s = self.settings
        space_id, messages = turn.space_id, turn.messages
        drafts = [_Draft(msg=m, n=i) for i, m in enumerate(messages, start=1)]
        # No cross-turn context here: the same vector finds near-duplicates, and the 0.93
        # threshold is calibrated on opening messages embedded alone.
        raws = _raw_messages(space_id, turn.session_id, turn.turn_id, messages, turn.created_at)
        # 1. Exact duplicates: skipped without an LLM call; their facts point at the old chunk.
        existing = dict(con.execute(
            """SELECT content_hash, any_value(id) FROM memories WHERE space_id = ? AND kind = 'chunk'
               AND status = 'active' AND content_hash IN (SELECT unnest(?)) GROUP BY content_hash""",
            [space_id, [content_hash(m.text) for m in messages]]).fetchall())
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
            vecs = embed(texts + [d.msg.text for d in users])
            for d, v in zip(live, vecs):
                d.vector = v
            self._near_duplicates(con, space_id, live)
            if users and s.fold_reconcile:
                probes = [F.ExtractedFact(text=d.msg.text) for d in users]
                known = F.find_existing(con, space_id, probes, vecs[len(live):], s.fact_candidate_threshold,
                                        candidates=self._candidates, keywords=postings_for(self.store))
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
        return TurnJob(turn=turn, drafts=drafts, raws=raws, needs_title=needs_title, view=view, ask_task=ask_task,
                    needs_call=bool(user_live or needs_title or any(d.near for d in live) or ask_task),
                    gist_after=next_gist(gist, rules_turn, step) if step is not None else None)

    async def finish(self, job: TurnJob, answer: TurnAnswer, mates: BatchMates | None = None, k: int = 0,
                      embed: EmbedFn | None = None) -> None:
        """Everything after the LLM call: dedup, titles, facts (reconciled), one write. In a
        batch, `mates` holds what the call gave for the turns before this one (turn `k`).
        One thread hop when the call's own reconciliation stands (the usual case); a separate
        reconcile call goes between the lookup and the write."""
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
        verdict = None
        if job.ask_task:  # left out or malformed: the rules decide, no second call (rules.MISSING_VERDICT)
            verdict = answer.task.as_verdict() if answer.task is not None else MISSING_VERDICT

        def plan_and_write() -> tuple[F.FactPlan | None, bool]:
            plan, decisions, settled = self._plan_facts_sync(turn.space_id, new_facts, [[] for _ in new_facts], shown, embed)
            if settled:
                self.store.write(lambda c: self._write(c, job, plan, decisions, verdict))
            return plan, settled

        plan, written = await asyncio.to_thread(plan_and_write)
        if not written:
            decisions = await self._reconcile(plan, new_facts)
            await self.store.awrite(lambda c: self._write(c, job, plan, decisions, verdict))
        if mates is not None and plan is not None:
            mates.record(k, answer.facts, plan)

    async def _plan_facts(self, space_id: str, new_facts: list[F.ExtractedFact], sources: list[list[str]],
                          shown: list[F.Existing] | None = None, embed: EmbedFn | None = None,
                          ) -> tuple[F.FactPlan | None, list[F.Decision] | None]:
        """Embed new facts and find close existing ones. The ingest call's own decisions stand
        when it was shown every close fact (`shown`); otherwise the LLM is asked to reconcile."""
        plan, decisions, settled = await asyncio.to_thread(self._plan_facts_sync, space_id, new_facts, sources, shown, embed)
        if settled:
            return plan, decisions
        return plan, await self._reconcile(plan, new_facts)

    def _plan_facts_sync(self, space_id: str, new_facts: list[F.ExtractedFact], sources: list[list[str]],
                         shown: list[F.Existing] | None = None, embed: EmbedFn | None = None,
                         ) -> tuple[F.FactPlan | None, list[F.Decision] | None, bool]:
        """`_plan_facts` up to the reconcile call: (plan, decisions, settled); not settled means
        the plan's close facts need the separate reconcile call (`_reconcile`)."""
        if not new_facts:
            return None, None, True
        fvecs = (embed or self.embedder.embed_passages)([f.text for f in new_facts])
        plan = F.FactPlan(facts=new_facts, vectors=fvecs, sources=sources)
        plan.existing = self.store.read(
            lambda c: F.find_existing(c, space_id, new_facts, fvecs, self.settings.fact_candidate_threshold,
                                      candidates=self._candidates, keywords=postings_for(self.store)))
        if shown and {e.id for e in plan.existing} <= {e.id for e in shown}:
            plan.existing = shown  # the ids the call answered with
            return plan, folded_decisions(new_facts), True
        if not plan.existing:
            return plan, None, True  # no candidates: every fact is ADD, no LLM call
        return plan, None, False

    async def _reconcile(self, plan: F.FactPlan, new_facts: list[F.ExtractedFact]) -> list[F.Decision]:
        rec = await complete_json(self.llm,
            prompts.RECONCILE_SYSTEM,
            prompts.RECONCILE_USER.format(existing=F.render_existing(plan.existing, self._clock()),
                                          new=F.render_new(new_facts)),
            F.ReconcileAnswer, purpose="reconcile")
        return rec.decisions

    def _near_duplicates(self, con: Conn, space_id: str, live: Sequence[_Draft]) -> None:
        for d in live:
            if d.msg.role == "tool":
                continue
            hits = [(i, sim) for i, sim in self._candidates(con, d.vector, [space_id], 5, ["chunk"])
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

    def _write(self, con: Conn, job: TurnJob, plan, decisions, verdict) -> None:
        turn, drafts, raws = job.turn, job.drafts, job.raws
        qid, space_id, session_id, turn_id, created_at = turn.qid, turn.space_id, turn.session_id, turn.turn_id, turn.created_at
        claim_done(con, qid, "done", utc_naive(self._clock()))
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
                # Bounded like the ingest call's facts (a schema where the server decodes to one):
                # these turns went raw because the model answered badly.
                ask, cap = Ask(users=len(texts)), self.settings.max_facts_per_turn
                with charged_to(space_id):
                    answer = await complete_json(self.llm,
                        prompts.FACTS_ONLY_SYSTEM.format(date=f"{created_at:%Y-%m-%d}"),
                        "\n".join(f"{i}. {redact(t)}" for i, t in enumerate(texts, start=1)),
                        F.FactsAnswer, purpose="ingest", max_tokens=ask.max_tokens(cap),
                        json_schema={"name": "memory_facts", "schema": ask.schema(cap)})
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


def _rules_turn(turn: QueuedTurn) -> Turn:
    """The turn as the task rules will see its chunks (times as stored: naive UTC, 1 ms apart)."""
    at = utc_naive(turn.created_at)
    return Turn(tuple(ChunkInfo(id=f"{turn.turn_id}:{i}", role=m.role, text=m.text, created_at=at + timedelta(milliseconds=i),
                                session_id=turn.session_id, turn_id=turn.turn_id) for i, m in enumerate(turn.messages)))


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


def vector_inputs(turn: QueuedTurn) -> list[str]:
    """Every text `_prepare` may embed for a turn: its chunks, and its user messages as fact probes."""
    raws = _raw_messages(turn.space_id, turn.session_id, turn.turn_id, turn.messages, turn.created_at)
    return [chunk_text(r) for r in raws] + [m.text for m in turn.messages if m.role == "user"]
