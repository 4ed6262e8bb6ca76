"""Replies shown while they are written (issue 30): the pump between the agent's growing text and
a channel's draft (bot.channel.ShowsDrafts), and the durable record that lets a restart finish
the same message instead of sending a second one.

The outbox still holds the finished text before it counts as delivered; a draft is only what was
shown meanwhile, and the reply replaces it. The states of one streamed reply (its message is
`seq` in the inbox) and what a restart, or a process taking the conversation over, does in each:

1. Written, nothing shown yet (no `reply_drafts` row; the message is pending). The turn runs again.
2. Shown: each new message of the draft is recorded (its platform handle, in `reply_drafts`) as
   soon as the platform has answered with its id, before anything more is shown. The turn runs
   again, and its draft goes on in those same messages (edits); if it fails instead, its apology
   replaces them the same way.
3. Replied: the outbox's put moves the handles onto the reply's parts, in the transaction that
   marks the message replied (`Outbox.put`). The outbox sends the parts: each one with a handle
   replaces that message (an edit), a part past the draft is sent as a new message, and draft
   messages the reply no longer needs are removed.
4. Delivered: the part is `sent`. A crash between the last edit and its record makes the same
   edit again, which changes nothing (Telegram's "message is not modified" is success).

What is left: a crash in the few milliseconds between the platform answering the first send of a
draft message and its record leaves that message as a fragment, and the reply comes again in a new
one. Nothing is shown that the finished reply would redact (memory.redaction.redact_growing).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from bot.channel import Channel, Draft, ShowsDrafts
from bot.errors import ChannelError, StoreError
from bot.message import Reply
from memory.redaction import redact_growing
from bot.delivery.inbox import PERSON_CONVERSATIONS
from memory.erase import Dependent, EraseRules
from memory.store.connection import Conn, Migration, Store
from memory.store.rows import utc_naive

log = logging.getLogger(__name__)

DRAFT_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        511,
        "reply drafts",
        """
        CREATE TABLE reply_drafts (
            inbox_seq BIGINT PRIMARY KEY,       -- the message whose reply is shown while it is written
            channel VARCHAR NOT NULL,
            handles VARCHAR NOT NULL,           -- JSON list: the platform's ids of the messages shown, in order
            updated_at TIMESTAMP NOT NULL
        );
        """,
    ),
)

# An erase takes the handles of the drafts shown to the person (no words: platform ids), with the
# received messages they answered (bot.delivery.inbox.INBOX_ERASE, which runs after this).
DRAFT_ERASE = EraseRules(dependents=(Dependent(
    "reply_drafts", f"inbox_seq IN (SELECT seq FROM inbox WHERE status <> 'pending' AND conversation_key IN {PERSON_CONVERSATIONS})"),))

# The outbox's writers (bot.delivery.outbox.OUTBOX_WRITES): the put that takes a draft's handles
# runs there too.
DRAFT_WRITES = "memgate.outbox"
# How long the end of a turn waits for a draft's last show (a platform call in flight).
FINISH_WAIT = 30.0


def take_draft(con: Conn, inbox_seq: int) -> list[str]:
    """Inside the outbox's put: the handles shown for this message's reply, and its record gone."""
    row = con.execute("DELETE FROM reply_drafts WHERE inbox_seq = ? RETURNING handles", [inbox_seq]).fetchone()
    return [str(h) for h in json.loads(row[0])] if row else []


class Drafts:
    """Starts a pump for each agent turn on a channel that shows drafts; reads and writes the record."""

    def __init__(self, store: Store, *, clock) -> None:
        self.store = store
        self.clock = clock

    def start(self, channel: Channel | None, reply: Reply, *, seq: int, conversation_key: str,
              known_secrets: Sequence[str] = ()) -> DraftPump | None:
        """A pump for the reply to message `seq`, None when the channel cannot show one."""
        if not isinstance(channel, ShowsDrafts):
            return None
        return DraftPump(self, channel, reply, seq, conversation_key, tuple(known_secrets))

    def ready(self, seq: int, conversation_key: str) -> tuple[list[str], bool]:
        """(what a previous run showed of this reply, whether it may be shown now): not while an
        earlier reply of the conversation waits in the outbox, which must come first."""
        def read(con: Conn):
            row = con.execute("SELECT handles FROM reply_drafts WHERE inbox_seq = ?", [seq]).fetchone()
            waiting = con.execute("SELECT 1 FROM outbox WHERE conversation_key = ? AND status = 'pending' LIMIT 1",
                                  [conversation_key]).fetchone()
            return row, waiting

        row, waiting = self.store.read(read)
        return ([str(h) for h in json.loads(row[0])] if row else []), waiting is None

    def record(self, seq: int, channel: str, handles: Sequence[str]) -> None:
        now = utc_naive(self.clock())

        def write(con: Conn) -> None:
            con.execute("DELETE FROM reply_drafts WHERE inbox_seq = ?", [seq])
            con.execute("INSERT INTO reply_drafts (inbox_seq, channel, handles, updated_at) VALUES (?, ?, ?, ?)",
                        [seq, channel, json.dumps(list(handles)), now])

        self.store.write(write, serial=DRAFT_WRITES)

    def forget(self, seq: int) -> None:
        self.store.write(lambda c: c.execute("DELETE FROM reply_drafts WHERE inbox_seq = ?", [seq]), serial=DRAFT_WRITES)


class DraftPump:
    """One turn's reply, from the model's growing text to the channel's draft.

    `update` is called with the text so far as the model writes it (the agent's `on_text`); a task
    shows the latest text, at most once per the draft's `interval` (what comes meanwhile is shown
    together), records every new draft message before showing more, and stops at `finish`."""

    def __init__(self, drafts: Drafts, channel: ShowsDrafts, reply: Reply, seq: int, conversation_key: str,
                 known_secrets: tuple[str, ...]) -> None:
        self._drafts = drafts
        self._channel = channel
        self._reply = reply
        self._seq = seq
        self._key = conversation_key
        self._known = known_secrets
        self._latest = ""
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.draft: Draft | None = None
        self.shown = ""   # the text shown last (redacted)

    def update(self, text: str) -> None:
        """The reply so far (from the model's stream, on the event loop)."""
        self._latest = text
        if self._closed.is_set():
            return
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="reply-draft")

    def written(self) -> None:
        """The model is done: its reply comes next, so nothing more is shown (a reply written
        faster than its first show goes whole)."""
        self._closed.set()
        self._wake.set()

    async def finish(self) -> None:
        """The turn is over: stop showing (the last show in flight completes and is recorded). The
        draft stays for the reply to replace."""
        self._closed.set()
        self._wake.set()
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=FINISH_WAIT)
        if not done:
            log.warning("a reply's draft did not finish showing within %.0f s; left as it is", FINISH_WAIT)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def drop(self) -> None:
        """Nothing will be sent for this turn: stop, and take the draft (and its record) away."""
        await self.finish()
        if self.draft is None:
            return
        try:
            await self.draft.drop()
            if self.draft.handles:
                await asyncio.to_thread(self._drafts.forget, self._seq)
        except (ChannelError, StoreError) as exc:
            log.warning("a cancelled reply's draft could not be taken away: %s", exc)

    async def _run(self) -> None:
        try:
            await self._pump()
        except ChannelError as exc:
            log.warning("%s: showing a reply while it is written failed (%s); it comes whole", self._reply.channel, exc)
        except StoreError as exc:
            # Unrecorded, a draft message could be left as a fragment by a crash: show no more of it.
            log.warning("a reply's draft could not be recorded (%s); the rest of it comes whole", exc)
        except Exception:
            log.exception("showing a reply while it is written failed; it comes whole")

    async def _pump(self) -> None:
        recorded: list[str] = []
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closed.is_set():
                return
            text = redact_growing(self._latest, self._known)
            if not text or text == self.shown:
                continue
            if self.draft is None:
                handles, clear = await asyncio.to_thread(self._drafts.ready, self._seq, self._key)
                if not clear:
                    return  # an earlier reply still waits to go out: this one must not show first
                if self._closed.is_set():
                    return  # written meanwhile: it comes whole
                self.draft = self._channel.open_draft(self._reply, handles)
                if self.draft is None:
                    return
                recorded = list(handles)
            if await self.draft.show(text):
                self.shown = text
            else:
                self._wake.set()   # held back for now: offered again after the interval
            if list(self.draft.handles) != recorded:
                recorded = list(self.draft.handles)
                await asyncio.to_thread(self._drafts.record, self._seq, self._reply.channel, recorded)
            try:
                await asyncio.wait_for(self._closed.wait(), self.draft.interval)
                return
            except TimeoutError:
                pass
