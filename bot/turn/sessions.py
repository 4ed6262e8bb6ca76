"""Conversation -> session: a new session after `idle` without messages or on /new.

The recent turns of a session come from the ingest queue, which holds every captured turn
already cleaned (no memory block, no memory-tool results), so history needs no second copy.
`alternating` shapes them as chat templates require: roles alternate, user first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from memory.store.connection import Conn, Migration, Store
from memory.store.rows import new_id, utc_naive
from memory.text import estimate_tokens

# The most turns of a session read back as history (their words are kept that long: see
# memory.ingest.queue.prune_turn_text).
HISTORY_TURNS = 20

SESSION_MIGRATIONS = (
    Migration(300, "sessions", """
        CREATE TABLE sessions (
            conversation_key VARCHAR PRIMARY KEY,
            session_id VARCHAR NOT NULL,
            space_id VARCHAR NOT NULL,
            started_at TIMESTAMP NOT NULL,
            last_at TIMESTAMP NOT NULL
        );
    """),
)


@dataclass(frozen=True, slots=True)
class Session:
    conversation_key: str
    session_id: str
    space_id: str
    started_at: datetime
    is_new: bool


class Sessions:
    """Tracks the current session of every conversation."""

    def __init__(self, store: Store, *, idle: timedelta, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.idle = idle
        self.clock = clock

    async def current(self, conversation_key: str, space_id: str, *, force_new: bool = False) -> Session:
        now = utc_naive(self.clock())

        def write(con: Conn) -> Session:
            row = con.execute("SELECT session_id, space_id, started_at, last_at FROM sessions WHERE conversation_key = ?",
                              [conversation_key]).fetchone()
            if row and not force_new and row[1] == space_id and now - row[3] <= self.idle:
                con.execute("UPDATE sessions SET last_at = ? WHERE conversation_key = ?", [now, conversation_key])
                return Session(conversation_key, row[0], row[1], row[2], False)
            sid = new_id("s")
            con.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?) ON CONFLICT (conversation_key) DO UPDATE SET "
                        "session_id = excluded.session_id, space_id = excluded.space_id, started_at = excluded.started_at, "
                        "last_at = excluded.last_at", [conversation_key, sid, space_id, now, now])
            return Session(conversation_key, sid, space_id, now, True)

        return await self.store.awrite(write)

    async def history(self, session: Session, max_tokens: int, max_turns: int = HISTORY_TURNS) -> list[dict]:
        """The session's recent user/assistant messages, newest last, within a token budget.

        Read by (space, session): a session id is only a name, and a turn filed under it in
        another space (an API client naming a group's session) is never this conversation's."""
        rows = await self.store.aread(lambda c: c.execute(
            "SELECT payload FROM ingest_queue WHERE space_id = ? AND session_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            [session.space_id, session.session_id, max_turns]).fetchall())
        out: list[dict] = []
        budget = max_tokens
        for (payload,) in rows:
            # Forgotten turns have no messages left; their text never comes back as history.
            msgs = [m for m in json.loads(payload)["messages"] if m["role"] in ("user", "assistant") and m["text"]]
            cost = sum(estimate_tokens(m["text"]) for m in msgs)
            if cost > budget:
                break
            budget -= cost
            out[:0] = [{"role": m["role"], "content": m["text"]} for m in msgs]
        return out


def alternating(history: Sequence[dict], text: str) -> tuple[list[dict], str]:
    """The history as chat templates take it, and the words to send now.

    A failed or cancelled turn is captured with the person's words only (nothing they said is
    lost), so the history can hold user messages in a row, often the same one retried (issue 30:
    three identical user messages, which templates that insist on alternating roles reject).
    Messages in a row of one role become one message, a repeat said once; the history starts
    with the person (an assistant message before their first is dropped: templates want user
    first) and ends with an answer; what they said that got no answer goes before `text`, unless
    it is `text` again.
    """
    merged: list[tuple[str, list[str]]] = []
    for m in history:
        said = m["content"].strip()
        if not said:
            continue
        if merged and merged[-1][0] == m["role"]:
            if said not in merged[-1][1]:
                merged[-1][1].append(said)
        else:
            merged.append((m["role"], [said]))
    if merged and merged[0][0] == "assistant":
        merged.pop(0)
    if merged and merged[-1][0] == "user":
        _, unanswered = merged.pop()
        text = "\n\n".join([*(t for t in unanswered if t != text.strip()), *([text] if text.strip() else [])])
    return [{"role": role, "content": "\n\n".join(parts)} for role, parts in merged], text
