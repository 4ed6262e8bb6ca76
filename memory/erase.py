"""Erasing a space: every row of every table that holds something of it goes, in one transaction.

Which tables hold a space's rows is found, not listed: every table with a `space_id` column loses
the space's rows (so a table a later migration adds, such as reminders, is erased without anyone
remembering to add it here). A table that belongs to a space through another key (a fact's
sources through `memories`, an inbox row through its conversation) is a `Dependent`, with the
SQL that finds the space's rows; dependents go first, while the rows they are found through are
still there. A table with a `space_id` that must stay (usage counts: how many tokens were spent,
never a word) is `Kept`, with the reason. tests/memory/test_erase.py fails on any table in none
of the three, so a new table is a decision, not an accident.

What the transaction does not reach, the caller does after it: the vector file and the in-memory
vectors of the space, the SKILL.md files, the layers' caches, and the rewrite of the DuckDB file
(memory/store/compact.py), which the transaction asks for so a crash before it still ends with a
rewritten file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memory.store.compact import request_rewrite
from memory.store.connection import Conn
from memory.store.keywords import drop_postings
from memory.store.postings_cache import DICT, STATS


@dataclass(frozen=True, slots=True)
class Dependent:
    """A table without a `space_id` whose rows belong to a space through other rows: `where` is
    an SQL condition on the table's rows naming the space as `$space`."""

    table: str
    where: str


@dataclass(frozen=True, slots=True)
class Kept:
    """A table an erase leaves as it is, and why (it holds no one's words)."""

    table: str
    why: str


@dataclass(frozen=True, slots=True)
class EraseRules:
    dependents: tuple[Dependent, ...] = ()
    kept: tuple[Kept, ...] = ()

    def __add__(self, other: EraseRules) -> EraseRules:
        return EraseRules(self.dependents + other.dependents, self.kept + other.kept)


@dataclass(frozen=True, slots=True)
class EraseCounts:
    """What a space holds, as a person is told before and after an erase."""

    facts: int = 0
    messages: int = 0            # chunks (what was said) and turns still waiting to be ingested
    tasks: int = 0
    skills: int = 0
    reminders: int = 0
    rows: dict[str, int] = field(default_factory=dict)   # after an erase: rows removed per table

    @property
    def total(self) -> int:
        return self.facts + self.messages + self.tasks + self.skills + self.reminders


MEMORY_RULES = EraseRules(
    dependents=(
        Dependent("fact_sources", "fact_id IN (SELECT id FROM memories WHERE space_id = $space) "
                                  "OR chunk_id IN (SELECT id FROM memories WHERE space_id = $space)"),
        Dependent("memory_versions", "id IN (SELECT id FROM memories WHERE space_id = $space)"),
        Dependent("skill_versions", "skill_id IN (SELECT id FROM skills WHERE space_id = $space)"),
        Dependent("spaces", "id = $space"),
    ),
    kept=(
        Kept("meta", "the store's settings and marks"),
        Kept("schema_migrations", "which migrations ran"),
        Kept("llm_usage", "calls and tokens, with no space and no words"),
        Kept(DICT, "term counts of the keyword index: lowered by the erased postings, a term no one else uses goes"),
        Kept(STATS, "the keyword index's totals"),
    ),
)


def space_tables(con: Conn) -> list[str]:
    """The tables with a `space_id` column (both backends)."""
    return [r[0] for r in con.execute(
        """SELECT c.table_name FROM information_schema.columns c
           JOIN information_schema.tables t ON t.table_catalog = c.table_catalog
                AND t.table_schema = c.table_schema AND t.table_name = c.table_name
           WHERE c.table_schema = current_schema() AND c.table_catalog = current_database()
             AND t.table_type = 'BASE TABLE' AND c.column_name = 'space_id'
           ORDER BY c.table_name""").fetchall()]


def all_tables(con: Conn) -> list[str]:
    return [r[0] for r in con.execute(
        """SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()
           AND table_catalog = current_database() AND table_type = 'BASE TABLE' ORDER BY table_name""").fetchall()]


def uncovered(con: Conn, rules: EraseRules) -> list[str]:
    """Tables an erase would neither empty of a space nor keep on purpose (should be none)."""
    covered = set(space_tables(con)) | {d.table for d in rules.dependents} | {k.table for k in rules.kept}
    return [t for t in all_tables(con) if t not in covered]


def counts(con: Conn, space_id: str) -> EraseCounts:
    """What the space holds: live facts, messages (chunks and turns not yet ingested), tasks,
    skills and reminders (when that table exists)."""
    mem = dict(con.execute(
        "SELECT kind, count(*) FROM memories WHERE space_id = ? AND status <> 'deleted' GROUP BY kind",
        [space_id]).fetchall())
    waiting = con.execute("SELECT count(*) FROM ingest_queue WHERE space_id = ? AND status = 'pending'",
                          [space_id]).fetchone()[0]
    tasks = con.execute("SELECT count(*) FROM tasks WHERE space_id = ?", [space_id]).fetchone()[0]
    skills = con.execute("SELECT count(*) FROM skills WHERE space_id = ?", [space_id]).fetchone()[0]
    reminders = 0
    if "reminders" in space_tables(con):
        reminders = con.execute("SELECT count(*) FROM reminders WHERE space_id = ?", [space_id]).fetchone()[0]
    return EraseCounts(facts=int(mem.get("fact", 0)), messages=int(mem.get("chunk", 0)) + int(waiting),
                       tasks=int(tasks), skills=int(skills), reminders=int(reminders))


def erase_spaces(con: Conn, space_ids: Sequence[str], rules: EraseRules) -> EraseCounts:
    """Remove every row of the spaces (one transaction: the caller's). Returns what they held,
    with the rows removed per table."""
    rules = MEMORY_RULES + rules
    kept = {k.table for k in rules.kept}
    before = [counts(con, s) for s in space_ids]
    removed: dict[str, int] = {}
    tables = [t for t in space_tables(con) if t not in kept]
    for space in space_ids:
        seqs = [r[0] for r in con.execute("SELECT seq FROM memories WHERE space_id = ?", [space]).fetchall()]
        drop_postings(con, seqs)   # the index's dictionary and totals follow, not only its rows
        for d in rules.dependents:
            n = len(con.execute(f"DELETE FROM {d.table} WHERE {d.where} RETURNING 1", {"space": space}).fetchall())
            removed[d.table] = removed.get(d.table, 0) + n
        for t in tables:
            n = len(con.execute(f"DELETE FROM {t} WHERE space_id = ? RETURNING 1", [space]).fetchall())
            removed[t] = removed.get(t, 0) + n
    request_rewrite(con, list(space_ids))  # the freed blocks still hold every word
    return EraseCounts(facts=sum(b.facts for b in before), messages=sum(b.messages for b in before),
                       tasks=sum(b.tasks for b in before), skills=sum(b.skills for b in before),
                       reminders=sum(b.reminders for b in before),
                       rows={t: n for t, n in sorted(removed.items()) if n})


def said_texts(con: Conn, space_ids: Sequence[str]) -> list[str]:
    """Every text the spaces hold as memories or queued turns (for the layers' files, such as a
    terminal's input history, which keep words outside the database)."""
    import json

    spaces = list(space_ids)
    texts = [r[0] for r in con.execute(
        "SELECT text FROM memories WHERE space_id IN (SELECT unnest(?)) AND text <> ''", [spaces]).fetchall()]
    for (payload,) in con.execute("SELECT payload FROM ingest_queue WHERE space_id IN (SELECT unnest(?))", [spaces]).fetchall():
        try:
            texts += [m.get("text", "") for m in json.loads(payload).get("messages", []) if m.get("text")]
        except (ValueError, AttributeError):
            continue
    return list(dict.fromkeys(texts))
