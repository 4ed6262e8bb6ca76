"""What a reply shown while it is written leaves in the store (issue 30 item 5), on both backends:
the draft's message handles are recorded, read back by a restart, and moved onto the reply's parts
by the outbox's put in the transaction that marks the message replied (the record is gone then);
an earlier reply still waiting in the conversation keeps a new draft from showing first. And the
pieces that carry a draft: the attached terminals' merged events, the parts that replace a draft."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.api.attached import Listener, merge_drafts
from bot.channel import DRAFT, DRAFT_DROP
from bot.delivery.drafts import Drafts
from bot.delivery.inbox import INBOX_MIGRATIONS, Inbox
from bot.delivery.outbox import OUTBOX_MIGRATIONS, Outbox, reply_from_json, with_draft
from bot.message import Document, Message, Reply
from bot.turn.sessions import SESSION_MIGRATIONS
from memory.store.backend import open_store
from tests.fakes.channel import RecordingChannel

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    url = f"duckdb:///{tmp_path / 'm.duckdb'}" if request.param == "duckdb" else request.getfixturevalue("pg_url")
    s = open_store(url, 384, extra_migrations=(*SESSION_MIGRATIONS, *INBOX_MIGRATIONS, *OUTBOX_MIGRATIONS))
    yield s
    s.close()


def message(mid: str) -> Message:
    return Message(channel="console", chat_id="ann", sender_id="ann", sender_name="Ann", text="hello", timestamp=NOW,
                   message_id=mid)


def test_the_handles_go_from_the_record_onto_the_replys_parts(store):
    inbox, drafts = Inbox(store, clock=lambda: NOW), Drafts(store, clock=lambda: NOW)
    outbox = Outbox(store, {"console": RecordingChannel("console")}, clock=lambda: NOW)
    entry = inbox.accept(message("1"))
    assert drafts.ready(entry.seq, "console:ann") == ([], True)
    drafts.record(entry.seq, "console", ["101"])
    drafts.record(entry.seq, "console", ["101", "102"])              # a second message of the draft
    assert drafts.ready(entry.seq, "console:ann") == (["101", "102"], True)   # what a restart goes on with
    assert outbox.put("console:ann", Reply(channel="console", chat_id="ann", text="The whole reply."), entry.seq)
    parts = [reply_from_json(r[0]) for r in store.read(lambda c: c.execute("SELECT reply FROM outbox").fetchall())]
    assert [p.extra for p in parts] == [{DRAFT: "101", DRAFT_DROP: "102"}]
    assert store.read(lambda c: c.execute("SELECT count(*) FROM reply_drafts").fetchone()[0]) == 0
    # The reply waits in the outbox: the next message's draft must not show before it.
    second = inbox.accept(message("2"))
    assert drafts.ready(second.seq, "console:ann") == ([], False)


def test_prune_drops_the_records_no_reply_took(store):
    inbox, drafts = Inbox(store, clock=lambda: NOW), Drafts(store, clock=lambda: NOW)
    outbox = Outbox(store, {}, clock=lambda: NOW)
    drafts.record(inbox.accept(message("1")).seq, "console", ["7"])
    outbox.prune(datetime(2027, 1, 1, tzinfo=UTC))
    assert store.read(lambda c: c.execute("SELECT count(*) FROM reply_drafts").fetchone()[0]) == 0


def test_text_parts_replace_the_draft_messages_in_order_and_the_rest_go():
    text = Reply(channel="telegram", chat_id="1", text="a")
    doc = Reply(channel="telegram", chat_id="1", text="", document=Document("f.txt", b"x"))
    assert [p.extra for p in with_draft([text, text], ["1"])] == [{DRAFT: "1"}, {}]
    assert [p.extra for p in with_draft([text, doc], ["1", "2", "3"])] == [{DRAFT: "1"}, {DRAFT_DROP: "2 3"}]
    assert with_draft([text], []) == [text]


EVENTS = st.lists(st.tuples(st.integers(0, 30), st.text("ab ", max_size=6)), min_size=1, max_size=12)


@given(EVENTS)
def test_merged_draft_events_say_what_the_events_said(events):
    """However many draft events a slow client's queue merged, the client ends with the same text."""
    listener = Listener("ann@attached")
    shown = ""
    for cut, added in events:
        cut = min(cut, len(shown))                      # what stays of the text had so far
        shown = shown[:cut] + added
        listener.put({"type": "draft", "reply_to": "m1", "from": cut, "text": added})
    assert len(listener._events) == 1                   # a reply's drafts waiting in a row are one event
    text = ""
    while listener._events:
        event = listener._events.popleft()
        text = text[: event["from"]] + event["text"]
    assert text == shown
    assert merge_drafts({"type": "draft", "from": 0, "text": "ab"}, {"type": "draft", "from": 1, "text": "c"})["text"] == "ac"
