"""Auto-capture: a finished turn -> clean messages -> one row of the durable ingest queue.

Cleaning removes what must never become memory: our own injected <memory-context> blocks
(else recall would feed on itself), the results of our own memory tools (they are memories
already), channel metadata, and empty messages. Secrets are redacted here, before the turn is
stored: the queue payload is what history, ingest and so recall read, so nothing later sees a
key or password the person typed (only the reply of this very turn did). A secret found in one
message is scrubbed from the whole turn, so the assistant's echo of it is not stored either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from memory.store.rows import new_id, utc_naive
from memory.store.connection import Conn, Store
from memory.redaction import find_secrets, redact
from memory.text import strip_memory_context

# Tools whose results are memories already: capturing them would store memories twice.
MEMORY_TOOLS = frozenset({
    "memory_search", "memory_get", "memory_timeline", "memory_store", "memory_forget",
    "task_summary", "skill_search", "skill_get", "skill_publish", "memory_write_public",
})

# Lines adapters or users may prepend that say nothing about the person ("[Telegram 12:01]",
# "[message_id: 123]"): channel metadata, not content.
_METADATA = re.compile(r"^\s*\[(?:telegram|wechat|wechat_mp|console|message_id|chat_id|sender|time)[^\]]*\]\s*", re.I | re.M)


@dataclass(frozen=True, slots=True)
class TurnMessage:
    """One message of a turn as the agent saw it."""

    role: str                      # user | assistant | tool
    text: str
    speaker: str | None = None
    tool_name: str | None = None


@dataclass(frozen=True, slots=True)
class CapturedTurn:
    space_id: str
    session_id: str | None
    turn_id: str
    created_at: datetime
    messages: tuple[TurnMessage, ...]


def clean_messages(messages: Iterable[TurnMessage]) -> list[TurnMessage]:
    """Drop our memory blocks, metadata, our own memory tools' results and empty messages; redact."""
    kept: list[TurnMessage] = []
    for m in messages:
        if m.role == "tool" and m.tool_name in MEMORY_TOOLS:
            continue
        text = _METADATA.sub("", strip_memory_context(m.text)).strip()
        if text:
            kept.append(TurnMessage(role=m.role, text=text, speaker=m.speaker, tool_name=m.tool_name))
    secrets = [s for m in kept for s in find_secrets(m.text)]
    out = []
    for m in kept:
        text = redact(m.text, secrets).strip()
        if text:
            out.append(TurnMessage(role=m.role, text=text, speaker=m.speaker, tool_name=m.tool_name))
    return out


def enqueue(con: Conn, turn: CapturedTurn) -> bool:
    """Append a cleaned turn to the ingest queue (idempotent per turn id); False if nothing to keep."""
    messages = clean_messages(turn.messages)
    if not messages:
        return False
    payload = json.dumps({"messages": [asdict(m) for m in messages], "created_at": utc_naive(turn.created_at).isoformat()},
                         ensure_ascii=False)
    created = utc_naive(turn.created_at)
    con.execute(
        """INSERT INTO ingest_queue (id, space_id, session_id, turn_id, payload, next_attempt_at, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING""",
        [new_id("q"), turn.space_id, turn.session_id, turn.turn_id, payload, created, created],
    )
    return True


def capture(store: Store, turn: CapturedTurn) -> bool:
    """Durably queue one turn in its own transaction (a crash after this loses nothing)."""
    return store.write(lambda con: enqueue(con, turn))


def decode_payload(payload: str) -> tuple[list[TurnMessage], datetime]:
    data = json.loads(payload)
    return [TurnMessage(**m) for m in data["messages"]], datetime.fromisoformat(data["created_at"])


def pending_count(store: Store, space_ids: Sequence[str] | None = None) -> int:
    """Turns waiting for ingestion (all spaces, or the given ones)."""
    if space_ids is None:
        return store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue WHERE status = 'pending'").fetchone()[0])
    return store.read(lambda c: c.execute(
        "SELECT count(*) FROM ingest_queue WHERE status = 'pending' AND space_id IN (SELECT unnest(?))",
        [list(space_ids)]).fetchone()[0])
