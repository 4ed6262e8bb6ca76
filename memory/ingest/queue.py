"""The ingest queue as the worker reads it: the next claim (a space's due turns, in order), the
runs of a claim that share one LLM call, a queued turn, and the message queued before it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.ingest.capture import TurnMessage, decode_payload
from memory.store.connection import Conn
from memory.store.dialect import dialect_of
from memory.text import estimate_tokens


@dataclass(frozen=True)
class QueuedTurn:
    """One turn as the queue holds it."""

    qid: str
    space_id: str
    session_id: str | None
    turn_id: str
    messages: list[TurnMessage]
    created_at: datetime
    attempts: int


class AlreadyIngested(Exception):
    """The turn was no longer pending when its memories were to be written: another process
    ingested it meanwhile (it held the space's lock after this one's lock session was lost)."""


def claim_done(con: Conn, qid: str, status: str, now: datetime, extra_attempts: int = 0) -> None:
    """First in the transaction that writes a turn's memories: mark it `status` only if it is
    still pending, else roll the whole write back (whichever process commits first wins)."""
    if con.execute("UPDATE ingest_queue SET status = ?, done_at = ?, attempts = attempts + ? "
                   "WHERE id = ? AND status = 'pending' RETURNING id", [status, now, extra_attempts, qid]).fetchone() is None:
        raise AlreadyIngested(qid)


# What a pruned turn's payload keeps: its created_at (and any other key) but no message. The
# "pruned" key marks it done; a message text cannot fake the marker (its quotes are escaped).
_PRUNED_PATCH = '{"messages": [], "pruned": true}'


def prune_turn_text(con: Conn, cutoff: datetime, keep_turns: int) -> int:
    """Empty the payloads of ingested turns that nothing reads any more; the rows stay as
    receipts (the (space, turn) key that makes a repeated capture a no-op). A turn's words are
    read back only as session history (the latest `keep_turns` of a session) and as the context
    of the next turn's ingest; once ingested (done, or stored raw) and finished before `cutoff`,
    a turn that is not among its session's latest `keep_turns`, or whose session saw nothing
    since `cutoff`, keeps no text here: its memories hold what was said. Returns turns pruned."""
    patch = dialect_of(con).json_patch("payload", _PRUNED_PATCH)
    return len(con.execute(f"""
        UPDATE ingest_queue SET payload = {patch} WHERE id IN (
            SELECT id FROM (
                SELECT id, status, done_at, payload,
                       row_number() OVER (PARTITION BY space_id, session_id ORDER BY created_at DESC, id DESC) AS rn,
                       max(created_at) OVER (PARTITION BY space_id, session_id) AS newest
                FROM ingest_queue) q
            WHERE q.status IN ('done', 'raw') AND q.done_at < ? AND (q.rn > ? OR q.newest < ?)
              AND q.payload NOT LIKE '%"pruned": true%' AND q.payload NOT LIKE '%"pruned":true%')
        RETURNING id""", [cutoff, keep_turns, cutoff]).fetchall())


def previous_message(con: Conn, qid: str, space_id: str, session_id: str | None) -> TurnMessage | None:
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
    due turn is the oldest among the spaces not in `held` (the ones other slots work on). Each
    row ends with the number of turns due in every space (the backlog the reply path watches)."""
    return con.execute(
        """WITH pend AS (SELECT id, space_id, session_id, turn_id, payload, attempts, created_at FROM ingest_queue
                         WHERE status = 'pending' AND next_attempt_at <= ?),
           due AS (SELECT * FROM pend WHERE space_id NOT IN (SELECT unnest(?::VARCHAR[])))
           SELECT id, space_id, session_id, turn_id, payload, attempts, (SELECT count(*) FROM pend) FROM due
           WHERE space_id = (SELECT space_id FROM due ORDER BY created_at, id LIMIT 1)
           ORDER BY created_at, id LIMIT ?""",
        [now, sorted(held), limit]).fetchall()
