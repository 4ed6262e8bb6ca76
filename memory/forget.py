"""Forgetting: a forgotten memory's text leaves every place it was kept, and only a tombstone
(the row's id, status 'deleted', empty text) stays, so ids in exports and logs still resolve.

What goes with a memory, so the text cannot come back through another door:
- a fact takes the chunks it was extracted from (the person's message says the same thing);
- a chunk takes its whole turn (the assistant's echo of it, tool output of that turn);
- every fact extracted only from forgotten chunks, and the older versions a forgotten fact
  superseded;
- the turns' ingest queue payloads (which are also the session history), and any other payload
  message with the same text (an exact repeat that dedup folded into the forgotten chunk);
- the keyword postings of every forgotten version, and a task's copy of its first message;
- whatever the layers above keep (the bot's outbox): each registered `ForgetHook` is called
  with the forgotten texts inside the same transaction. memory/ does not know those tables;
- and the disk: DuckDB keeps old row versions in freed blocks, so the forget asks for a rewrite
  of the file (memory/store/compact.py), which the engine runs in the background.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.store.compact import request_rewrite
from memory.store.connection import Conn
from memory.store.keywords import drop_postings
from memory.store.rows import bump_seq, utc_naive
from memory.text import content_hash

# (connection, forgotten texts, the spaces forgotten in): called inside the forget's transaction.
ForgetHook = Callable[[Conn, Sequence[str], Sequence[str]], None]

_MAX_ROUNDS = 8  # closure rounds: fact -> chunk -> turn -> fact ... converges in 2-3


@dataclass(frozen=True, slots=True)
class ForgetResult:
    forgotten: tuple[str, ...]    # the ids asked for that were forgotten
    refused: tuple[str, ...]      # not found in the caller's spaces
    also: tuple[str, ...] = ()    # rows that held the same text (sources, echoes, derived facts)


def _closure(con: Conn, found: list[str], space_ids: Sequence[str]) -> list[str]:
    """The found rows plus every row that holds their text (see the module docstring)."""
    spaces = list(space_ids)
    ids = set(found)
    for _ in range(_MAX_ROUNDS):
        rows = con.execute(
            """WITH f AS (SELECT unnest($ids) AS id),
               src AS (SELECT s.chunk_id AS id FROM fact_sources s JOIN f ON s.fact_id = f.id),
               chunks AS (SELECT m.id, m.turn_id FROM memories m
                          WHERE m.kind = 'chunk' AND (m.id IN (SELECT id FROM f) OR m.id IN (SELECT id FROM src))),
               turn_mates AS (SELECT m.id FROM memories m JOIN chunks c ON m.turn_id = c.turn_id
                              WHERE m.kind = 'chunk' AND c.turn_id IS NOT NULL),
               all_chunks AS (SELECT id FROM chunks UNION SELECT id FROM turn_mates),
               orphans AS (SELECT s.fact_id AS id FROM fact_sources s GROUP BY s.fact_id
                           HAVING bool_and(s.chunk_id IN (SELECT id FROM all_chunks))),
               older AS (SELECT m.id FROM memories m WHERE m.superseded_by IN (SELECT id FROM f))
               SELECT m.id FROM memories m
               WHERE m.space_id IN (SELECT unnest($spaces))
                 AND m.id IN (SELECT id FROM f UNION SELECT id FROM all_chunks UNION SELECT id FROM orphans
                              UNION SELECT id FROM older)""",
            {"ids": sorted(ids), "spaces": spaces}).fetchall()
        grown = ids | {r[0] for r in rows}
        if grown == ids:
            break
        ids = grown
    return sorted(ids)


def _scrub_payloads(con: Conn, space_ids: Sequence[str], turns: set[tuple[str, str]], hashes: set[str]) -> None:
    """Empty the forgotten turns' payloads and drop repeats of forgotten text from the others."""
    rows = con.execute("SELECT id, space_id, turn_id, payload, status FROM ingest_queue WHERE space_id IN (SELECT unnest(?))",
                       [list(space_ids)]).fetchall()
    for qid, space, turn, payload, status in rows:
        data = json.loads(payload)
        msgs = data.get("messages", [])
        kept = [] if (space, turn) in turns else [m for m in msgs if content_hash(m.get("text", "")) not in hashes]
        if len(kept) == len(msgs):
            continue
        data["messages"] = kept
        data["forgotten"] = True
        # A pending turn with nothing left is done: there is nothing to ingest.
        done = status == "pending" and not kept
        con.execute("UPDATE ingest_queue SET payload = ?, status = CASE WHEN ? THEN 'done' ELSE status END WHERE id = ?",
                    [json.dumps(data, ensure_ascii=False), done, qid])


def forget(con: Conn, ids: Sequence[str], space_ids: Sequence[str], now: datetime,
           hooks: Sequence[ForgetHook] = ()) -> ForgetResult:
    """Forget memories of the given spaces everywhere, keeping tombstones (one transaction)."""
    found = [r[0] for r in con.execute(
        "SELECT id FROM memories WHERE id IN (SELECT unnest(?)) AND space_id IN (SELECT unnest(?)) AND status <> 'deleted'",
        [list(ids), list(space_ids)]).fetchall()]
    refused = tuple(i for i in ids if i not in found)
    if not found:
        return ForgetResult((), refused)
    every = _closure(con, found, space_ids)
    rows = con.execute("SELECT id, seq, space_id, turn_id, kind, text FROM memories WHERE id IN (SELECT unnest(?))",
                       [every]).fetchall()
    drop_postings(con, [r[1] for r in rows])
    turns = {(r[2], r[3]) for r in rows if r[4] == "chunk" and r[3]}
    hashes = {content_hash(r[5]) for r in rows if r[5]}
    texts = [r[5] for r in rows if r[5]]
    con.execute(
        """UPDATE memories SET status = 'deleted', pinned = false, text = '', title = '', search_text = '',
               content_hash = NULL, embedding = NULL, merge_history = NULL, updated_at = ?
           WHERE id IN (SELECT unnest(?))""",
        [utc_naive(now), every])
    bump_seq(con, every)
    _scrub_payloads(con, space_ids, turns, hashes)
    con.execute("UPDATE tasks SET first_user_text = NULL WHERE space_id IN (SELECT unnest(?)) AND first_user_text IN (SELECT unnest(?))",
                [list(space_ids), texts])
    for hook in hooks:
        hook(con, texts, space_ids)
    request_rewrite(con, sorted({r[2] for r in rows}))  # the freed blocks still hold the text
    also = tuple(i for i in every if i not in found)
    return ForgetResult(tuple(found), refused, also)
