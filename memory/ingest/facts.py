"""Facts: what extraction returns, how candidates for reconciliation are found, and how the
LLM's ADD / UPDATE / DELETE / NOOP decisions become rows.

The LLM sees existing facts with small integer ids and their age, never our ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from memory.store.keywords import keyword_candidates
from memory.store.postings_cache import PostingsCache
from memory.store.rows import NewMemory, add_sources, bump_seq, insert_memories, new_id, utc_naive
from memory.recall.block import humanize_age
from memory.store.connection import Conn
from memory.text import query_terms, tokenize
from memory.store.vectors import vector_candidates

CATEGORIES = ("about_you", "preferences", "people", "experiences", "plans", "routines", "constraints")
MAX_FACTS_PER_TURN = 20  # DESIGN allows 50; a real turn states a handful (see config memory.max_facts_per_turn)
MAX_EXISTING = 60
# (con, query vector, spaces, n, kinds) -> [(id, cosine)], best first: vector_candidates' contract.
Candidates = Callable[[Conn, np.ndarray, Sequence[str], int, Sequence[str] | None], list[tuple[str, float]]]


class ExtractedFact(BaseModel):
    text: str
    category: str = "about_you"
    tags: list[str] = Field(default_factory=list)
    intent: str = "statement"
    from_: list[int] = Field(default_factory=list, alias="from")
    # Reconciliation folded into the ingest call: the KNOWN FACTS id it touches and how.
    known: int | None = None
    action: str | None = None
    # In a batched call: the fact of an earlier turn of the batch it touches, (turn k, fact i).
    earlier: tuple[int, int] | None = None

    model_config = {"populate_by_name": True}

    @field_validator("earlier", mode="before")
    @classmethod
    def _earlier_ref(cls, v):
        # Lenient: a malformed reference is no reference (the fact is then reconciled the usual way).
        if isinstance(v, str):
            v = v.replace(".", " ").replace(",", " ").replace(":", " ").split()
        if isinstance(v, (list, tuple)) and len(v) == 2:
            try:
                k, i = (int(x) for x in v)
            except (TypeError, ValueError):
                return None
            return (k, i) if k > 0 and i > 0 else None
        return None

    @field_validator("known", mode="before")
    @classmethod
    def _known_id(cls, v):
        if isinstance(v, str) and v.strip().isdigit():
            return int(v)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @field_validator("action", mode="before")
    @classmethod
    def _action_word(cls, v):
        return v.strip().upper() if isinstance(v, str) else None

    @field_validator("category")
    @classmethod
    def _known_category(cls, v: str) -> str:
        return v if v in CATEGORIES else "about_you"

    @field_validator("tags")
    @classmethod
    def _few_tags(cls, v: list[str]) -> list[str]:
        return [t.strip()[:40] for t in v if t.strip()][:3]


class FactsAnswer(BaseModel):
    facts: list[ExtractedFact] = Field(default_factory=list)


class Decision(BaseModel):
    new: str
    action: Literal["ADD", "UPDATE", "DELETE", "NOOP"]
    target: int | None = None
    text: str | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _upper(cls, v: str) -> str:
        return str(v).upper()


class ReconcileAnswer(BaseModel):
    decisions: list[Decision] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Existing:
    """An existing fact shown to the LLM as [n]."""

    id: str
    text: str
    created_at: datetime
    pinned: bool


@dataclass
class FactPlan:
    """The new facts of a turn with their vectors and the existing facts they may touch."""

    facts: list[ExtractedFact]
    vectors: np.ndarray
    sources: list[list[str]]                       # chunk ids per fact
    existing: list[Existing] = field(default_factory=list)
    # Filled by apply_plan: per fact, the fact that now stands for it (its new row, or the
    # existing one a NOOP repeated; None when it deleted one), and per retired existing id its
    # successor (None when deleted). A batch shows them to its later turns as known facts.
    outcome: list[Existing | None] = field(default_factory=list)
    retired: dict[str, Existing | None] = field(default_factory=dict)


def keep_statements(facts: Sequence[ExtractedFact], limit: int = MAX_FACTS_PER_TURN) -> list[ExtractedFact]:
    """One-off questions are not preferences: facts of intent "query" are dropped; at most
    `limit` are kept (a runaway answer of hundreds of "facts" is junk, not a rich turn)."""
    seen: set[str] = set()
    out = []
    for f in facts:
        key = " ".join(f.text.lower().split())
        if f.intent.lower() != "query" and f.text.strip() and key not in seen:
            seen.add(key)
            out.append(f)
    return out[:limit]


def find_existing(con: Conn, space_id: str, facts: Sequence[ExtractedFact], vectors: np.ndarray,
                  vector_threshold: float, overlap_threshold: float = 0.5, *,
                  candidates: Candidates = vector_candidates, keywords: PostingsCache | None = None) -> list[Existing]:
    """Existing active facts close to any new one: top-5 by vector above the threshold plus
    top-5 by keyword sharing at least half the new fact's terms; at most 60 in all.
    `candidates` finds the vector side (the store's VectorCache gives the SQL path's rows);
    `keywords`, the store's postings cache, scores the keyword side from memory and holds the
    rows written since the index's build (memory/store/fresh_rows.py)."""
    found: dict[str, None] = {}
    for fact, vec in zip(facts, vectors):
        for fid, sim in candidates(con, vec, [space_id], 5, ["fact"]):
            if sim >= vector_threshold:
                found.setdefault(fid)
        terms = query_terms(fact.text)
        if terms:
            kw = keyword_candidates(con, terms, [space_id], 5, ["fact"], cache=keywords)
            if kw:
                texts = dict(con.execute("SELECT id, text FROM memories WHERE id IN (SELECT unnest(?))",
                                         [[i for i, _ in kw]]).fetchall())
                for fid, _ in kw:
                    shared = set(terms) & set(tokenize(texts.get(fid, "")))
                    if len(shared) / len(terms) >= overlap_threshold:
                        found.setdefault(fid)
        if len(found) >= MAX_EXISTING:
            break
    ids = list(found)[:MAX_EXISTING]
    if not ids:
        return []
    rows = con.execute(
        "SELECT id, text, created_at, pinned FROM memories WHERE id IN (SELECT unnest(?)) AND status = 'active' ORDER BY created_at",
        [ids],
    ).fetchall()
    return [Existing(*r) for r in rows]


def render_existing(existing: Sequence[Existing], now: datetime) -> str:
    return "\n".join(f"[{i}] ({humanize_age(e.created_at, now)}{', pinned' if e.pinned else ''}) {e.text}"
                     for i, e in enumerate(existing, start=1))


def render_new(facts: Sequence[ExtractedFact]) -> str:
    return "\n".join(f"({letter(i)}) {f.text}" for i, f in enumerate(facts))


def letter(i: int) -> str:
    """The letter a new fact is shown with: a, b, ... z, a26, a27, ..."""
    return chr(ord("a") + i) if i < 26 else f"a{i}"


def apply_plan(con: Conn, plan: FactPlan, decisions: Sequence[Decision] | None, *, space_id: str,
               created_at: datetime, embed) -> list[str]:
    """Write the facts of a turn. `decisions` None means: no candidates, every fact is ADD.

    UPDATE inserts the new text and archives the old fact with `superseded_by`; DELETE marks
    the old fact deleted (kept for audit). Pinned facts are never deleted or rewritten: an
    UPDATE of a pinned fact becomes an ADD beside it. Returns the ids of facts written.
    """
    by_letter = {letter(i): i for i in range(len(plan.facts))}
    actions: dict[int, Decision] = {}
    for d in decisions or ():
        idx = by_letter.get(d.new.strip("() ").lower())
        if idx is not None and idx not in actions:
            actions[idx] = d
    rows: list[NewMemory] = []
    vecs: list[np.ndarray] = []
    archive: list[tuple[str, int]] = []  # (old id, index in rows of its successor)
    deleted: list[str] = []
    inherit: dict[int, str] = {}
    plan.outcome, plan.retired = [None] * len(plan.facts), {}
    stands: dict[int, int] = {}          # fact index -> its position in rows
    for i, fact in enumerate(plan.facts):
        d = actions.get(i) if decisions is not None else None
        action = d.action if d else "ADD"
        target = plan.existing[d.target - 1] if d and d.target and 0 < d.target <= len(plan.existing) else None
        if action in ("UPDATE", "DELETE") and target is None:
            action = "ADD" if action == "UPDATE" else "NOOP"
        if action == "NOOP":
            plan.outcome[i] = target
            continue
        if action == "DELETE":
            if not target.pinned:
                deleted.append(target.id)
                plan.retired[target.id] = None
            continue
        text, vec = fact.text, plan.vectors[i]
        if action == "UPDATE" and d.text and d.text.strip() and d.text.strip() != fact.text:
            text = d.text.strip()
            vec = embed(text)
        fid = new_id("f")
        if action == "UPDATE" and not target.pinned:
            archive.append((target.id, len(rows)))
            inherit[len(rows)] = target.id
        stands[i] = len(rows)
        rows.append(NewMemory(space_id=space_id, kind="fact", text=text, title=text[:120], created_at=created_at,
                              id=fid, category=fact.category, tags=tuple(fact.tags), sources=tuple(plan.sources[i])))
        vecs.append(vec)
    ids = insert_memories(con, rows, np.vstack(vecs)) if rows else []
    for i, pos in stands.items():
        plan.outcome[i] = Existing(ids[pos], rows[pos].text, utc_naive(created_at), False)
    by_pos = {pos: i for i, pos in stands.items()}
    for old, pos in archive:
        plan.retired[old] = plan.outcome[by_pos[pos]]
    now = utc_naive(created_at)
    for old, pos in archive:
        con.execute("UPDATE memories SET status = 'archived', superseded_by = ?, updated_at = ? WHERE id = ? AND NOT pinned",
                    [ids[pos], now, old])
    for pos, old in inherit.items():
        # The new version stands for everything the old one was derived from.
        srcs = [r[0] for r in con.execute("SELECT chunk_id FROM fact_sources WHERE fact_id = ?", [old]).fetchall()]
        if srcs:
            add_sources(con, [ids[pos]] * len(srcs), srcs)
    if deleted:
        con.execute("UPDATE memories SET status = 'deleted', updated_at = ? WHERE id IN (SELECT unnest(?)) AND NOT pinned",
                    [now, deleted])
        bump_seq(con, deleted)
    return ids
