"""Retention (opt-in, `[memory] forget_raw_after_days`): raw messages leave once they have done
their work. A chunk (what was said) older than the cutoff goes when its facts were extracted
(`needs_facts` is false), its task, if any, is closed, and its turn is not waiting in the ingest
queue; what was learnt from it stays (facts keep their sources' ids, which resolve to tombstones).

It goes the way a forget goes (memory/forget.py), without the cascade: the row keeps a tombstone
(status 'deleted', empty text, no vector), its keyword postings go, its turn's queue payload is
emptied, and the file is rewritten so the words leave the disk (memory/store/compact.py).
"""

from __future__ import annotations

from datetime import datetime

from memory.store.compact import request_rewrite
from memory.store.connection import Conn
from memory.store.dialect import dialect_of
from memory.store.keywords import drop_postings
from memory.store.rows import bump_seq, utc_naive

BATCH = 5000   # chunks per transaction: a first run over years of messages stays a bounded write

# What a turn's payload keeps once its messages are gone (as prune_turn_text leaves it).
_EMPTIED = '{"messages": [], "pruned": true}'


def forget_raw(con: Conn, cutoff: datetime, now: datetime) -> int:
    """Tombstone up to BATCH raw messages older than `cutoff` whose work is done; returns how many."""
    rows = con.execute(
        """SELECT m.id, m.seq, m.space_id, m.turn_id FROM memories m
           WHERE m.kind = 'chunk' AND m.status <> 'deleted' AND m.created_at < ? AND NOT m.needs_facts
             AND (m.task_id IS NULL OR m.task_id IN (SELECT id FROM tasks WHERE status <> 'open'))
             AND NOT EXISTS (SELECT 1 FROM ingest_queue q WHERE q.space_id = m.space_id AND q.turn_id = m.turn_id
                             AND q.status = 'pending')
           ORDER BY m.created_at LIMIT ?""", [utc_naive(cutoff), BATCH]).fetchall()
    if not rows:
        return 0
    ids = [r[0] for r in rows]
    drop_postings(con, [r[1] for r in rows])
    con.execute("""UPDATE memories SET status = 'deleted', pinned = false, text = '', title = '', search_text = '',
                       content_hash = NULL, embedding = NULL, merge_history = NULL, updated_at = ?
                   WHERE id IN (SELECT unnest(?))""", [utc_naive(now), ids])
    bump_seq(con, ids)
    turns = sorted({(r[2], r[3]) for r in rows if r[3]})
    if turns:
        patch = dialect_of(con).json_patch("payload", _EMPTIED)
        con.execute(f"""UPDATE ingest_queue SET payload = {patch}
                        WHERE (space_id, turn_id) IN (SELECT unnest(?), unnest(?))""",
                    [[t[0] for t in turns], [t[1] for t in turns]])
    request_rewrite(con, sorted({r[2] for r in rows}))
    return len(rows)
