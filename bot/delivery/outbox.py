"""The durable outbox: replies are rows before they are sent, and go out in order.

A reply is split into the parts its channel sends as one message each (`Channel.split`, when
the channel has it) and written in one transaction with its inbox message marked `replied`.
Per conversation only the oldest unsent part is ever attempted, so a part never overtakes the
one before it, nor a reply an earlier reply. A send that fails for a transient reason (429,
5xx, timeout, connection) is retried with backoff, no sooner than the platform's retry_after,
across restarts; a permanent failure (blocked, chat gone) closes the reply and is counted.

What a row keeps: the reply's text is redacted before it is written (an assistant that echoes
a key or a password the person just typed does not put it at rest, nor send it back out), and a
part that was sent or given up keeps only its receipt (no text, no attachment). A forget
reaches the parts still waiting (`scrub_forgotten`). Old receipts are pruned.

Backoff: delay(n) = min(cap, base * 2 ** (n - 1)) after the n-th failed attempt, raised to the
platform's retry_after when it gave one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta

from bot.channel import DRAFT, DRAFT_DROP, Channel
from bot.delivery.cluster import Cluster
from bot.delivery.drafts import DRAFT_MIGRATIONS, take_draft
from bot.delivery.inbox import PERSON_CONVERSATIONS, Inbox, InboxStatus
from bot.delivery.passes import PassLoop
from bot.errors import ChannelError, StoreWriteError
from bot.message import Document, Image, Reply
from bot.observe import NoObserver, TurnObserver
from memory.erase import Dependent, EraseRules
from memory.store.connection import Conn, Migration, Store
from memory.store.dialect import dialect_of
from memory.store.rows import utc_naive
from memory.redaction import redact

log = logging.getLogger(__name__)

OUTBOX_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        510,
        "outbox",
        """
        CREATE TABLE outbox (
            seq BIGINT PRIMARY KEY,             -- send order within a conversation
            reply_id VARCHAR NOT NULL,          -- the parts of one reply share it
            inbox_seq BIGINT,                   -- the message it answers (NULL for notices)
            conversation_key VARCHAR NOT NULL,
            channel VARCHAR NOT NULL,
            part INTEGER NOT NULL,
            parts INTEGER NOT NULL,
            reply VARCHAR NOT NULL,             -- JSON of bot.message.Reply
            status VARCHAR NOT NULL,            -- pending | sent | failed
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at TIMESTAMP NOT NULL,
            last_error VARCHAR,
            created_at TIMESTAMP NOT NULL,
            done_at TIMESTAMP
        );
        """,
    ),
    *DRAFT_MIGRATIONS,  # what was shown of a reply while it was written (bot.delivery.drafts)
)

# An erase drops the replies to the person, sent (receipts) or still waiting.
OUTBOX_ERASE = EraseRules(dependents=(Dependent("outbox", f"conversation_key IN {PERSON_CONVERSATIONS}"),))


@dataclass(frozen=True)
class OutboxSettings:
    retry_base: float = 1.0        # seconds before the first retry
    retry_cap: float = 300.0       # the longest wait between two attempts
    give_up_hours: float = 24.0    # a reply still failing after this is closed as undeliverable
    poll: float = 1.0              # how often due retries are looked for


@dataclass
class OutboxStats:
    """What the outbox did since start (read by /metrics and the reliability bench)."""

    sent: int = 0
    retried: int = 0
    failed_permanent: int = 0
    gave_up: int = 0
    unrecorded: int = 0            # sent, but the store could not record it yet


@dataclass(frozen=True, slots=True)
class _Part:
    seq: int
    reply_id: str
    inbox_seq: int | None
    channel: str
    part: int
    parts: int
    reply: Reply
    attempts: int
    next_attempt_at: datetime
    created_at: datetime


def backoff(attempts: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Seconds to wait after the `attempts`-th failure (see the module docstring)."""
    delay = min(cap, base * 2 ** max(0, attempts - 1))
    return max(delay, retry_after or 0.0)


# What a finished part keeps: the addressing, without words or attachments.
_RECEIPT_PATCH = '{"text": "", "document": null, "image": null, "extra": {}}'


def _receipt(con: Conn) -> str:
    return dialect_of(con).json_patch("reply", _RECEIPT_PATCH)


def redact_reply(reply: Reply, known: Sequence[str] = ()) -> Reply:
    """The reply with secrets replaced (the person's own, `known`, included) in text and caption."""
    image = reply.image
    if image is not None and image.caption:
        image = replace(image, caption=redact(image.caption, known))
    return replace(reply, text=redact(reply.text, known), image=image)


def reply_to_json(reply: Reply) -> str:
    data = asdict(reply)
    # Attachments carry bytes: stored as base64 so a queued picture or file survives a restart.
    for name in ("document", "image"):
        attached = getattr(reply, name)
        if attached is not None:
            data[name] = {**asdict(attached), "data": base64.b64encode(attached.data).decode("ascii")}
    return json.dumps(data, ensure_ascii=False)


def reply_from_json(text: str) -> Reply:
    data = json.loads(text)
    for name, kind in (("document", Document), ("image", Image)):
        attached = data.get(name)
        if attached is not None:
            data[name] = kind(**{**attached, "data": base64.b64decode(attached["data"])})
    return Reply(**data)


def with_draft(parts: Sequence[Reply], handles: Sequence[str]) -> list[Reply]:
    """The parts, each text part in turn replacing one message of the reply's draft (DRAFT); the
    draft messages left over are removed with the last part (DRAFT_DROP)."""
    if not handles:
        return list(parts)
    out, left = [], list(handles)
    for part in parts:
        if left and part.document is None and part.image is None:
            part = replace(part, extra={**part.extra, DRAFT: left.pop(0)})
        out.append(part)
    if left:
        out[-1] = replace(out[-1], extra={**out[-1].extra, DRAFT_DROP: " ".join(left)})
    return out


FORGOTTEN = "[forgotten]"
# The outbox's writers, serialised apart from memory's (see PgStore.write); a reply put marks
# its inbox message in the same transaction (row locks keep the two serials apart safely).
OUTBOX_WRITES = "memgate.outbox"


class Outbox(PassLoop):
    """Writes replies durably and delivers them, in order, with retries (`start`: in the background)."""

    def __init__(self, store: Store, channels: Mapping[str, Channel], *, clock: Callable[[], datetime],
                 settings: OutboxSettings | None = None, observer: TurnObserver | None = None,
                 cluster: Cluster | None = None) -> None:
        self.store = store
        self.cluster = cluster or Cluster(store, clock=clock)
        self.observer = observer or NoObserver()
        self.channels = channels
        self.clock = clock
        self.settings = settings or OutboxSettings()
        self.stats = OutboxStats()
        self._locks: dict[str, asyncio.Lock] = {}
        # Parts delivered whose "sent" could not be written (disk full): recorded before any
        # further send of their conversation, so a full disk never makes a reply go out twice.
        self._unrecorded: dict[int, datetime] = {}
        super().__init__("outbox", self.settings.poll)

    # --- writing -----------------------------------------------------------------------------
    def split(self, reply: Reply) -> list[Reply]:
        """The reply as the parts its channel sends one message each."""
        channel = self.channels.get(reply.channel)
        split = getattr(channel, "split", None)
        parts = list(split(reply)) if split is not None else [reply]
        return parts or [reply]

    def put(self, conversation_key: str, reply: Reply, inbox_seq: int | None, known_secrets: Sequence[str] = ()) -> bool:
        """Queue a reply (one transaction: its parts, and its message marked replied); False, and
        nothing written, when its message is no longer pending (another process replied to it).

        `known_secrets` are the secrets found in the message it answers: an echo of them is
        redacted too, even where no pattern would recognise it.
        """
        def write(con: Conn) -> bool:
            if inbox_seq is not None and not Inbox.claim_reply(con, inbox_seq):
                return False
            self.put_in(con, conversation_key, reply, inbox_seq, known_secrets)
            return True

        return self.store.write(write, serial=OUTBOX_WRITES)

    def put_in(self, con: Conn, conversation_key: str, reply: Reply, inbox_seq: int | None = None,
               known_secrets: Sequence[str] = ()) -> None:
        """Queue a reply inside the caller's write (of serial OUTBOX_WRITES): what made it due (a
        reminder claimed) commits with it or not at all, so it is queued exactly once."""
        parts = self.split(redact_reply(reply, known_secrets))
        if inbox_seq is not None:
            # What was shown of this reply while it was written is replaced by it (bot.delivery.drafts).
            parts = with_draft(parts, take_draft(con, inbox_seq))
        now = utc_naive(self.clock())
        reply_id = uuid.uuid4().hex
        first = con.execute("SELECT coalesce(max(seq), 0) + 1 FROM outbox").fetchone()[0]
        con.executemany(
            "INSERT INTO outbox (seq, reply_id, inbox_seq, conversation_key, channel, part, parts, reply, status, "
            "next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
            [[first + i, reply_id, inbox_seq, conversation_key, reply.channel, i, len(parts), reply_to_json(p), now, now]
             for i, p in enumerate(parts)])
        self.cluster.own_if_free(con, conversation_key, reply.channel)

    async def aput(self, conversation_key: str, reply: Reply, inbox_seq: int | None,
                   known_secrets: Sequence[str] = ()) -> bool:
        return await asyncio.to_thread(self.put, conversation_key, reply, inbox_seq, known_secrets)

    @staticmethod
    def scrub_forgotten(con: Conn, texts: Sequence[str], space_ids: Sequence[str]) -> None:
        """A forget's hook: parts still waiting in the spaces' conversations lose the forgotten text.

        Runs inside the forget's transaction. A reply written before the forget may quote what
        is now forgotten (an echo); it must not go out after it.
        """
        texts = [t for t in texts if t.strip()]
        if not texts:
            return
        rows = con.execute(
            """SELECT o.seq, o.reply FROM outbox o
               WHERE o.status = 'pending' AND o.conversation_key IN
                     (SELECT conversation_key FROM sessions WHERE space_id IN (SELECT unnest(?)))""",
            [list(space_ids)]).fetchall()
        for seq, text in rows:
            reply = reply_from_json(text)
            scrubbed = reply.text
            for t in sorted(texts, key=len, reverse=True):
                scrubbed = scrubbed.replace(t, FORGOTTEN)
            if scrubbed != reply.text:
                con.execute("UPDATE outbox SET reply = ? WHERE seq = ?", [reply_to_json(replace(reply, text=scrubbed)), seq])

    def prune(self, older_than: datetime) -> int:
        """Drop receipts of parts finished before `older_than` (and drafts no reply took by then)."""
        cutoff = utc_naive(older_than)

        def write(con: Conn) -> int:
            con.execute("DELETE FROM reply_drafts WHERE updated_at < ?", [cutoff])
            return len(con.execute("DELETE FROM outbox WHERE status IN ('sent', 'failed') AND done_at < ? RETURNING seq",
                                   [cutoff]).fetchall())

        return self.store.write(write, serial=OUTBOX_WRITES)

    # --- delivering --------------------------------------------------------------------------
    async def one_pass(self) -> float:
        """Deliver what is due (a previous run's too); a retry not yet due waits for a later pass."""
        try:
            for key in await asyncio.to_thread(self._due_conversations):
                await self.flush(key)
        except StoreWriteError as exc:
            log.warning("outbox: the store cannot be written (%s); retrying", exc)
        return self.settings.poll

    def _due_conversations(self) -> list[str]:
        now = utc_naive(self.clock())
        mine, params = self.cluster.mine_sql()  # another live process delivers its own conversations
        rows = self.store.read(lambda c: c.execute(
            f"""SELECT conversation_key FROM outbox WHERE status = 'pending' AND {mine}
               GROUP BY conversation_key HAVING min(next_attempt_at) <= ? ORDER BY min(seq)""", [*params, now]).fetchall())
        return [r[0] for r in rows]

    async def flush(self, conversation_key: str) -> None:
        """Send the conversation's due parts in order; stop at the first one that must wait."""
        lock = self._locks.setdefault(conversation_key, asyncio.Lock())
        async with lock:
            while True:
                part = await asyncio.to_thread(self._next, conversation_key)
                if part is None or part.next_attempt_at > utc_naive(self.clock()):
                    return
                if not await self._attempt(part):
                    return

    def _next(self, conversation_key: str) -> _Part | None:
        """The oldest unsent part of the conversation (first recording any sent-but-unrecorded one)."""
        if self._unrecorded:
            self._record_unrecorded()
        row = self.store.read(lambda c: c.execute(
            """SELECT seq, reply_id, inbox_seq, channel, part, parts, reply, attempts, next_attempt_at, created_at
               FROM outbox WHERE conversation_key = ? AND status = 'pending' ORDER BY seq LIMIT 1""",
            [conversation_key]).fetchone())
        if row is None:
            return None
        seq, reply_id, inbox_seq, channel, idx, parts, reply, attempts, due, created = row
        return _Part(seq, reply_id, inbox_seq, channel, idx, parts, reply_from_json(reply), attempts, due, created)

    async def _attempt(self, part: _Part) -> bool:
        """One send; True when it went out (the next part may follow)."""
        if part.seq in self._unrecorded:
            return False  # sent already; its record waits for the disk
        channel = self.channels.get(part.channel)
        try:
            if channel is None:
                raise ChannelError(f"no channel {part.channel} is running")
            await channel.send(part.reply)
        except ChannelError as exc:
            await asyncio.to_thread(self._failed, part, exc)
            return False
        except Exception as exc:  # an adapter bug: retried like a transient failure, and logged
            log.exception("outbox: sending on %s raised", part.channel)
            await asyncio.to_thread(self._failed, part, ChannelError(f"{type(exc).__name__}: {exc}"))
            return False
        self.stats.sent += 1
        now = utc_naive(self.clock())
        try:
            await asyncio.to_thread(self._sent, part.seq, now)
        except StoreWriteError:
            self.stats.unrecorded += 1
            self._unrecorded[part.seq] = now
            log.warning("outbox: part %s was sent but cannot be recorded yet (store not writable)", part.seq)
            return False
        return True

    def _sent(self, seq: int, now: datetime) -> None:
        def write(con: Conn) -> None:
            con.execute(f"UPDATE outbox SET status = 'sent', attempts = attempts + 1, done_at = ?, reply = {_receipt(con)} "
                        "WHERE seq = ?", [now, seq])
            # The message is answered once no part of any of its replies is still pending.
            row = con.execute("SELECT inbox_seq FROM outbox WHERE seq = ?", [seq]).fetchone()
            if row and row[0] is not None:
                left = con.execute("SELECT count(*) FROM outbox WHERE inbox_seq = ? AND status = 'pending'",
                                   [row[0]]).fetchone()[0]
                if not left:
                    Inbox.mark(con, row[0], InboxStatus.ANSWERED, now)

        self.store.write(write, serial=OUTBOX_WRITES)

    def _record_unrecorded(self) -> None:
        for seq, at in list(self._unrecorded.items()):
            self._sent(seq, at)
            del self._unrecorded[seq]

    def _failed(self, part: _Part, exc: ChannelError) -> None:
        now = utc_naive(self.clock())
        attempts = part.attempts + 1
        error = str(exc)[:500]
        too_old = now - part.created_at > timedelta(hours=self.settings.give_up_hours)
        self.observer.on_send_failure(part.channel, "permanent" if exc.permanent else "transient")
        if exc.permanent or too_old:
            if exc.permanent:
                self.stats.failed_permanent += 1
                log.error("outbox: reply %s on %s cannot be delivered: %s", part.reply_id, part.channel, error)
            else:
                self.stats.gave_up += 1
                log.error("outbox: reply %s on %s still failing after %s h; given up: %s", part.reply_id, part.channel,
                          self.settings.give_up_hours, error)

            def close(con: Conn) -> None:
                # The rest of this reply goes with it: later parts make no sense without this one.
                con.execute("UPDATE outbox SET status = 'failed', attempts = attempts + (seq = ?)::INT, last_error = ?, "
                            f"done_at = ?, reply = {_receipt(con)} WHERE reply_id = ? AND status = 'pending'",
                            [part.seq, error, now, part.reply_id])
                if part.inbox_seq is not None:
                    Inbox.mark(con, part.inbox_seq, InboxStatus.CLOSED, now, note=f"undeliverable: {error}")

            self.store.write(close, serial=OUTBOX_WRITES)
            return
        delay = backoff(attempts, self.settings.retry_base, self.settings.retry_cap, exc.retry_after)
        self.stats.retried += 1
        log.warning("outbox: part %d/%d of reply %s on %s failed (%s); retry %d in %.1f s", part.part + 1, part.parts,
                    part.reply_id, part.channel, error, attempts, delay)
        self.store.write(lambda c: c.execute(
            "UPDATE outbox SET attempts = ?, next_attempt_at = ?, last_error = ? WHERE seq = ?",
            [attempts, now + timedelta(seconds=delay), error, part.seq]), serial=OUTBOX_WRITES)

    def counts(self) -> dict[str, int]:
        """Parts per status."""
        return dict(self.store.read(lambda c: c.execute("SELECT status, count(*) FROM outbox GROUP BY status").fetchall()))

