"""The inbox and outbox keep what they must and nothing more (issue 10, sections 1 and 5).

Found: after a turn, the inbox row still held the person's raw message and the outbox row the
raw reply, so a key typed in a message (and its echo) sat in the database, and a forgotten text
survived there after /forget. Now: text is redacted before either table stores it, finished rows
keep only a receipt, a forget reaches replies still waiting, and old receipts are pruned.
Real DuckDB file, real Inbox/Outbox, a recording channel; no mocks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.errors import ChannelError
from bot.delivery.inbox import INBOX_MIGRATIONS, Inbox
from bot.message import Image, Message, Reply
from bot.delivery.outbox import FORGOTTEN, OUTBOX_MIGRATIONS, Outbox, OutboxSettings
from bot.turn.sessions import SESSION_MIGRATIONS
from memory.store.connection import Store
from memory.redaction import find_secrets
from tests.fakes.channel import RecordingChannel

KEY = "sk-proj-Abc123def456ghi789jkl012mno345"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class FailingChannel(RecordingChannel):
    """Refuses every send with the given error (a blocked user, a 429...)."""

    def __init__(self, error: ChannelError) -> None:
        super().__init__("console")
        self.error = error
        self.attempts = 0

    async def send(self, reply: Reply) -> None:
        self.attempts += 1
        raise self.error


@pytest.fixture
def db(tmp_path):
    s = Store(tmp_path / "m.duckdb", 384, extra_migrations=(*SESSION_MIGRATIONS, *INBOX_MIGRATIONS, *OUTBOX_MIGRATIONS))
    yield s
    s.close()


def message(text: str, mid: str = "1", chat: str = "alice") -> Message:
    return Message(channel="console", chat_id=chat, sender_id=chat, sender_name="Alice Example", text=text,
                   timestamp=NOW, message_id=mid)


def table_text(store: Store, table: str) -> str:
    """Every column of every row of the table, as one string (what a leak scan would read)."""
    rows = store.read(lambda c: c.execute(f"SELECT * FROM {table}").fetchall())
    return "\n".join(str(v) for row in rows for v in row)


def outbox(store: Store, channel: RecordingChannel, retry_base: float = 0.01) -> Outbox:
    return Outbox(store, {channel.name: channel}, clock=lambda: datetime.now(UTC),
                  settings=OutboxSettings(retry_base=retry_base, poll=0.05))


def test_the_inbox_stores_the_message_redacted_and_hands_the_turn_the_original(db):
    inbox = Inbox(db, clock=lambda: NOW)
    text = f"my openai key is {KEY} and my password is hunter2, keep them safe"
    entry = inbox.accept(message(text))
    assert entry is not None and entry.message.text == text  # the turn in progress sees it whole
    stored = table_text(db, "inbox")
    assert KEY not in stored and "hunter2" not in stored
    # After a crash the pending message is answered from what was stored: redacted, not lost.
    (pending,) = inbox.pending()
    assert pending.seq == entry.seq and "[REDACTED" in pending.message.text
    assert pending.message.text.startswith("my openai key is") and pending.message.text.endswith("keep them safe")


async def test_a_delivered_turn_leaves_only_receipts(db):
    inbox, channel = Inbox(db, clock=lambda: NOW), RecordingChannel()
    box = outbox(db, channel)
    text = "my password is hunter2, please remember that I love green tea"
    entry = inbox.accept(message(text))
    # The assistant echoes the secret in words no pattern knows; the message's secrets go too.
    echo = Reply(channel="console", chat_id="alice", text="Noted: hunter2. And green tea, of course.",
                 image=Image(filename="p.png", data=b"\x89PNG..", caption="for hunter2"))
    box.put("console:alice", echo, entry.seq, find_secrets(text))
    assert "hunter2" not in table_text(db, "outbox")
    await box.flush("console:alice")
    assert [r.text for r in channel.sent] == ["Noted: [REDACTED]. And green tea, of course."]
    assert channel.sent[0].image is not None and channel.sent[0].image.caption == "for [REDACTED]"
    for table in ("inbox", "outbox"):
        stored = table_text(db, table)
        assert "green tea" not in stored and "Alice Example" not in stored and "PNG" not in stored, (table, stored)
    assert inbox.counts() == {"answered": 1} and box.counts() == {"sent": 1}
    # The receipt still recognises a redelivery of the same message.
    assert inbox.accept(message(text)) is None


async def test_a_permanent_failure_is_counted_closed_and_keeps_no_text(db):
    inbox = Inbox(db, clock=lambda: NOW)
    channel = FailingChannel(ChannelError("Forbidden: bot was blocked by the user", permanent=True))
    box = outbox(db, channel)
    entry = inbox.accept(message("tell me about my trip to Kyoto"))
    box.put("console:alice", Reply(channel="console", chat_id="alice", text="Your Kyoto trip was in May."), entry.seq)
    await box.flush("console:alice")
    await box.flush("console:alice")  # nothing left to try: a permanent failure is never retried
    assert channel.attempts == 1
    assert box.stats.failed_permanent == 1 and box.stats.retried == 0
    assert box.counts() == {"failed": 1} and inbox.counts() == {"closed": 1}
    assert "Kyoto" not in table_text(db, "outbox") and "Kyoto" not in table_text(db, "inbox")
    note = db.read(lambda c: c.execute("SELECT note FROM inbox").fetchone()[0])
    assert note.startswith("undeliverable: Forbidden")


async def test_a_transient_failure_keeps_the_text_until_it_is_sent(db):
    inbox = Inbox(db, clock=lambda: NOW)
    channel = FailingChannel(ChannelError("Too Many Requests", retry_after=0.05))
    box = outbox(db, channel)
    entry = inbox.accept(message("hello"))
    box.put("console:alice", Reply(channel="console", chat_id="alice", text="Hello back, Alice."), entry.seq)
    await box.flush("console:alice")
    assert box.counts() == {"pending": 1} and "Hello back" in table_text(db, "outbox")  # still to be sent
    channel.send = RecordingChannel.send.__get__(channel)  # the platform accepts again
    await asyncio.sleep(0.1)
    await box.flush("console:alice")
    assert [r.text for r in channel.sent] == ["Hello back, Alice."]
    assert box.counts() == {"sent": 1} and "Hello back" not in table_text(db, "outbox")


def test_forget_reaches_replies_still_waiting_in_that_space_only(db):
    db.write(lambda c: c.executemany(
        "INSERT INTO sessions (conversation_key, session_id, space_id, started_at, last_at) VALUES (?, ?, ?, ?, ?)",
        [["console:alice", "s1", "sp_alice", NOW, NOW], ["console:bob", "s2", "sp_bob", NOW, NOW]]))
    box = outbox(db, RecordingChannel())
    passport = "my passport number is in the blue drawer"
    for chat in ("alice", "bob"):
        box.put(f"console:{chat}", Reply(channel="console", chat_id=chat, text=f"You said: {passport}"), None)
    db.write(lambda c: Outbox.scrub_forgotten(c, [passport], ["sp_alice"]))
    replies = dict(db.read(lambda c: c.execute("SELECT conversation_key, reply FROM outbox").fetchall()))
    assert json.loads(replies["console:alice"])["text"] == f"You said: {FORGOTTEN}"
    assert json.loads(replies["console:bob"])["text"] == f"You said: {passport}"  # another space: untouched


async def test_old_receipts_are_pruned_and_waiting_rows_kept(db):
    when = [NOW]
    inbox, channel = Inbox(db, clock=lambda: when[0]), RecordingChannel()
    box = Outbox(db, {"console": channel}, clock=lambda: when[0], settings=OutboxSettings())
    done = inbox.accept(message("first", "1"))
    box.put("console:alice", Reply(channel="console", chat_id="alice", text="one"), done.seq)
    await box.flush("console:alice")
    when[0] = NOW + timedelta(days=10)
    waiting = inbox.accept(message("second", "2"))
    assert waiting is not None
    assert inbox.prune(NOW + timedelta(days=3)) == 1 and box.prune(NOW + timedelta(days=3)) == 1
    assert [e.seq for e in inbox.pending()] == [waiting.seq]
    assert inbox.counts() == {"pending": 1} and box.counts() == {}


SECRET_SHAPES = st.sampled_from([
    KEY, "ghp_" + "a1B2c3D4e5" * 4, "AKIAIOSFODNN7EXAMPLE", "xoxb-123456789012-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
])
WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=40)


@pytest.fixture(scope="module")
def shared_inbox(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("inbox") / "m.duckdb", 384, extra_migrations=INBOX_MIGRATIONS)
    yield store, Inbox(store, clock=lambda: NOW), itertools.count()
    store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=WORDS, secret=SECRET_SHAPES, after=WORDS)
def test_no_secret_shape_is_ever_at_rest_in_the_inbox(shared_inbox, before, secret, after):
    store, inbox, ids = shared_inbox
    entry = inbox.accept(message(f"{before} {secret} {after}", mid=f"p{next(ids)}"))
    stored = store.read(lambda c: c.execute("SELECT message FROM inbox WHERE seq = ?", [entry.seq]).fetchone()[0])
    assert secret not in stored


async def test_channel_health_is_each_channels_own_report_while_running(tmp_path, embedder):
    """Found: /healthz reported every channel as up, whatever it was doing (a hard-coded True)."""
    from bot.app import build_app
    from bot.config import load_settings

    class Reader(RecordingChannel):
        up = True

        def is_up(self) -> bool:
            return self.up

    (tmp_path / "none.toml").write_text("")
    env = {"MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_CONFIG": str(tmp_path / "none.toml")}
    reader, plain = Reader("telegram"), RecordingChannel("console")
    app = build_app(load_settings(None, env=env), channels=[reader, plain], embedder=embedder)
    assert app.gateway.channel_health() == {"telegram": False, "console": False}  # not started
    async with app:
        assert app.gateway.channel_health() == {"telegram": True, "console": True}
        reader.up = False  # its poll loop died, its login expired...
        assert app.gateway.channel_health() == {"telegram": False, "console": True}
    assert app.gateway.channel_health() == {"telegram": False, "console": False}
