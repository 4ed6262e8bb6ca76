"""The durable inbox: every accepted message is a row before the platform is acknowledged.

A message is written here (one transaction) before `Gateway.inbound` returns, and adapters
acknowledge the platform (Telegram offset, iLink cursor, Official Account response) only
after that. Its status then follows the turn:

    pending   accepted, not yet answered (a restart answers it)
    waiting   its attachment could not be read yet (no speech endpoint, a failed fetch or
              transcription): the person was told, the words are kept, and it is tried again
              (bounded per sender and in all: past the bounds it is closed, and the person told)
    replied   the reply is in the outbox (the outbox delivers it, across restarts)
    answered  every part of the reply was delivered
    closed    nothing more will happen: refused without a reply, undeliverable, or failed

Redeliveries are recognised by (channel, platform key), so each message is answered once.

What a row keeps of the person's words: the text is redacted before it is written (a secret
typed in a message is never at rest here; the turn in progress works on the message it was
handed in memory, so its reply may still see what the person just wrote), and it is emptied
once the message is replied to or closed: from then on the row is only a receipt (channel,
platform key, status, times) that recognises redeliveries. Old receipts are pruned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum

from bot.delivery.cluster import CLUSTER_MIGRATIONS, Cluster
from bot.message import Kind, Media, Message
from memory.erase import Dependent, EraseRules, Kept
from memory.store.connection import Conn, Migration, Store
from memory.store.dialect import dialect_of
from memory.store.rows import utc_naive
from memory.redaction import redact

INBOX_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        500,
        "inbox",
        """
        CREATE TABLE inbox (
            seq BIGINT PRIMARY KEY,             -- arrival order (no nextval default: see DESIGN 8)
            channel VARCHAR NOT NULL,
            platform_key VARCHAR NOT NULL,      -- what a redelivery of the same message repeats
            conversation_key VARCHAR NOT NULL,
            message VARCHAR NOT NULL,           -- JSON of bot.message.Message
            status VARCHAR NOT NULL,            -- pending | replied | answered | closed
            note VARCHAR,                       -- why it was closed
            received_at TIMESTAMP NOT NULL,
            done_at TIMESTAMP
        );
        CREATE UNIQUE INDEX inbox_platform ON inbox(channel, platform_key);
        """,
    ),
    *CLUSTER_MIGRATIONS,  # who answers which conversation when several processes share the database
    # How often a waiting message's attachment was tried (bot/media): it is given up after a cap.
    Migration(503, "inbox attempts", "ALTER TABLE inbox ADD COLUMN attempts INTEGER DEFAULT 0;"),
    # Reads of its attachment begun and not finished (bot/media/sandbox.py): a read that hit a limit,
    # or that the process died in, leaves it at 1, and the file is then never read again (issue 31).
    Migration(504, "inbox reading", "ALTER TABLE inbox ADD COLUMN reading INTEGER DEFAULT 0;"),
)

WAITING_FULL = -1  # Inbox.wait: the message could not wait (its sender's, or everyone's, bound was reached)


# A person's conversations: where their sessions ran, and their direct chats where a DM's chat id
# is their own id (Telegram, the terminal, iLink). A group's conversations are the group's.
PERSON_CONVERSATIONS = ("(SELECT conversation_key FROM sessions WHERE space_id = $space "
                        "UNION SELECT channel || ':' || external_id FROM identities WHERE space_id = $space)")
# An erase takes the person's received messages, except those still pending: one of them is the
# command being answered (its reply needs the row), the others are in flight and keep their words
# only until they are answered, as every message does.
INBOX_ERASE = EraseRules(
    dependents=(Dependent("inbox", f"status <> 'pending' AND conversation_key IN {PERSON_CONVERSATIONS}"),),
    kept=(Kept("workers", "the gateway processes alive"),
          Kept("conversation_owners", "which process delivers a conversation: no words")),
)

# What a finished message keeps: its fields without the words, sender name or attachments.
_RECEIPT_PATCH = '{"text": "", "sender_name": "", "media": []}'


def _receipt(con: Conn) -> str:
    return dialect_of(con).json_patch("message", _RECEIPT_PATCH)


# The inbox's writers, serialised apart from memory's (see PgStore.write).
INBOX_WRITES = "memgate.inbox"


class InboxStatus(StrEnum):
    PENDING = "pending"
    WAITING = "waiting"
    REPLIED = "replied"
    ANSWERED = "answered"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One accepted message and its place in the inbox."""

    seq: int
    message: Message


def platform_key(msg: Message) -> str:
    """What identifies a message across the platform's redeliveries.

    Telegram message ids are unique per chat only, so the conversation is part of the key; an
    edit repeats the message id, so it is told apart by its edit time. A message without a
    platform id gets a random key (it cannot be redelivered recognisably anyway).
    """
    if not msg.message_id:
        return f"local:{uuid.uuid4().hex}"
    key = f"{msg.chat_id}:{msg.thread_id or ''}:{msg.message_id}"
    if msg.kind is Kind.EDITED:
        key += f":edited:{msg.timestamp.timestamp()}"
    return key


def message_to_json(msg: Message) -> str:
    """The message as the inbox stores it: its text redacted (see the module docstring)."""
    data = asdict(msg)
    data["text"] = redact(msg.text)
    for m in data["media"]:
        m["transcript"] = redact(m["transcript"])  # the platform's reading of a voice note is words too
    data["timestamp"] = msg.timestamp.isoformat()
    data["kind"] = msg.kind.value
    return json.dumps(data, ensure_ascii=False)


def message_from_json(text: str) -> Message:
    data = json.loads(text)
    data["timestamp"] = datetime.fromisoformat(data["timestamp"])
    data["kind"] = Kind(data["kind"])
    data["media"] = tuple(Media(**{**m, "kind": Kind(m["kind"])}) for m in data.get("media", ()))
    return Message(**data)


def _waiting_full(con: Conn, channel: str, sender: object, per_person: int | None, total: int | None) -> bool:
    """Whether `total` messages wait already, or `per_person` of this sender's on `channel` (the
    rows are few: the bounds keep them so)."""
    rows = con.execute("SELECT channel, message FROM inbox WHERE status = 'waiting'").fetchall()
    if total is not None and len(rows) >= total:
        return True
    return per_person is not None and sum(
        1 for ch, text in rows if ch == channel and json.loads(text).get("sender_id") == sender) >= per_person


class Inbox:
    """Rows of the `inbox` table. Blocking calls; the gateway runs them off the event loop."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime], cluster: Cluster | None = None) -> None:
        self.store = store
        self.clock = clock
        self.cluster = cluster or Cluster(store, clock=clock)

    def accept(self, msg: Message) -> InboxEntry | None:
        """Record a message (one transaction); None when this message was recorded before."""
        key = platform_key(msg)
        now = utc_naive(self.clock())

        def write(con: Conn) -> InboxEntry | None:
            seen = con.execute("SELECT 1 FROM inbox WHERE channel = ? AND platform_key = ?", [msg.channel, key]).fetchone()
            if seen:
                return None
            seq = con.execute("SELECT coalesce(max(seq), 0) + 1 FROM inbox").fetchone()[0]
            con.execute("INSERT INTO inbox (seq, channel, platform_key, conversation_key, message, status, received_at) "
                        "VALUES (?, ?, ?, ?, ?, 'pending', ?)",
                        [seq, msg.channel, key, msg.conversation_key, message_to_json(msg), now])
            self.cluster.own(con, msg.conversation_key)  # this process answers it
            return InboxEntry(seq, msg)

        return self.store.write(write, serial=INBOX_WRITES)

    def pending(self, conversations: Sequence[str] | None = None) -> list[InboxEntry]:
        """Accepted but not yet replied to, oldest first (what a restart, or the adopter of a dead
        process's conversations, must answer); only of `conversations` when given."""
        if conversations is not None and not conversations:
            return []
        where, params = ("", []) if conversations is None else (
            " AND conversation_key IN (SELECT unnest(?::VARCHAR[]))", [list(conversations)])
        rows = self.store.read(lambda c: c.execute(
            f"SELECT seq, message FROM inbox WHERE status = 'pending'{where} ORDER BY seq", params).fetchall())
        return [InboxEntry(seq, message_from_json(text)) for seq, text in rows]

    def wait(self, seq: int, note: str, *, counts: bool = True, per_person: int | None = None,
             total: int | None = None) -> int:
        """Its attachment could not be read yet: keep the message (words and all) to try again
        later; returns how many counted attempts it has had. `counts` False: waiting for the owner
        (a speech endpoint to be set up), which no number of tries can wear out.

        A message that never waited before is kept only while fewer than `per_person` messages of
        its sender (on its channel) and fewer than `total` in all wait: else WAITING_FULL, and it
        stays pending for the caller to close."""
        now = utc_naive(self.clock())

        def write(con: Conn) -> int:
            if per_person is not None or total is not None:
                row = con.execute("SELECT channel, message, note FROM inbox WHERE seq = ? AND status = 'pending'",
                                  [seq]).fetchone()
                if row is not None and row[2] is None and _waiting_full(con, row[0], json.loads(row[1]).get("sender_id"),
                                                                        per_person, total):
                    return WAITING_FULL
            row = con.execute(
                "UPDATE inbox SET status = 'waiting', note = ?, done_at = ?, attempts = coalesce(attempts, 0) + ? "
                "WHERE seq = ? AND status = 'pending' RETURNING attempts", [note, now, int(counts), seq]).fetchone()
            return int(row[0]) if row else 0

        return self.store.write(write, serial=INBOX_WRITES)

    def begin_reading(self, seq: int) -> bool:
        """Record that a read of the message's attachment begins (before it does); False when one
        began before and never finished: it hit a limit, or the process died while it ran."""
        row = self.store.write(lambda c: c.execute(
            "UPDATE inbox SET reading = coalesce(reading, 0) + 1 WHERE seq = ? RETURNING reading", [seq]).fetchone(),
            serial=INBOX_WRITES)
        return row is None or int(row[0]) <= 1

    def end_reading(self, seq: int) -> None:
        """The read finished (with text, or a plain refusal): a later try may read it again."""
        self.store.write(lambda c: c.execute("UPDATE inbox SET reading = 0 WHERE seq = ?", [seq]), serial=INBOX_WRITES)

    def due_waiting(self, tried_before: datetime, channels: Sequence[str], *, skip_note: str | None = None) -> list[InboxEntry]:
        """Waiting messages last tried before `tried_before`, made pending again (oldest first), to
        be queued once more; those whose note starts with `skip_note` stay waiting."""
        if not channels:
            return []
        cutoff = utc_naive(tried_before)
        skip = f"{skip_note}%" if skip_note else "\x00never"
        rows = self.store.write(lambda c: c.execute(
            "UPDATE inbox SET status = 'pending' WHERE status = 'waiting' AND done_at <= ? "
            "AND channel IN (SELECT unnest(?::VARCHAR[])) AND coalesce(note, '') NOT LIKE ? RETURNING seq, message",
            [cutoff, list(channels), skip]).fetchall(), serial=INBOX_WRITES)
        return [InboxEntry(seq, message_from_json(text)) for seq, text in sorted(rows)]

    def close(self, seq: int, note: str) -> None:
        """Nothing more will be sent for this message (refused silently, failed, undeliverable)."""
        now = utc_naive(self.clock())
        self.store.write(lambda c: c.execute(
            f"UPDATE inbox SET status = 'closed', note = ?, done_at = ?, message = {_receipt(c)} "
            "WHERE seq = ? AND status IN ('pending', 'replied', 'waiting')",
            [note, now, seq]), serial=INBOX_WRITES)

    @staticmethod
    def claim_reply(con: Conn, seq: int) -> bool:
        """Inside the outbox's transaction: mark the message replied if it is still pending; False
        when it is not (answered already: by a process that adopted it while this one still ran
        its turn, e.g. after the database restarted), and then this reply must not be written."""
        return con.execute(f"UPDATE inbox SET status = 'replied', done_at = NULL, message = {_receipt(con)} "
                           "WHERE seq = ? AND status = 'pending' RETURNING seq", [seq]).fetchone() is not None

    @staticmethod
    def mark(con: Conn, seq: int, status: InboxStatus, now: datetime, note: str | None = None) -> None:
        """Move a message on inside another writer's transaction (the outbox's).

        Past `pending` the words are not needed any more (the reply is in the outbox, or nothing
        will be sent), so the row keeps only its receipt.
        """
        done = now if status in (InboxStatus.ANSWERED, InboxStatus.CLOSED) else None
        con.execute(f"UPDATE inbox SET status = ?, note = coalesce(?, note), done_at = ?, message = {_receipt(con)} WHERE seq = ?",
                    [status.value, note, done, seq])

    def prune(self, older_than: datetime) -> int:
        """Drop receipts finished before `older_than` (no platform redelivers that late)."""
        cutoff = utc_naive(older_than)
        return len(self.store.write(lambda c: c.execute(
            "DELETE FROM inbox WHERE status IN ('answered', 'closed') AND done_at < ? RETURNING seq", [cutoff]).fetchall(), serial=INBOX_WRITES))

    def counts(self) -> dict[str, int]:
        """Messages per status (for /metrics and the reliability bench)."""
        return dict(self.store.read(lambda c: c.execute("SELECT status, count(*) FROM inbox GROUP BY status").fetchall()))

