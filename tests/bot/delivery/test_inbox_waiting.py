"""The inbox's bounds on what waits and its record of attachment reads (issue 31), on both
backends: a message that never waited is kept only within its sender's and everyone's bound, and
a read begun is recorded before it runs, so one that never finished is not begun again."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.delivery.inbox import INBOX_MIGRATIONS, WAITING_FULL, Inbox
from bot.message import Message
from memory.store.backend import open_store
from memory.store.url import duckdb_url

NOW = datetime(2026, 1, 1, 9, tzinfo=UTC)


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def inbox(request, tmp_path):
    url = duckdb_url(tmp_path / "m.duckdb") if request.param == "duckdb" else request.getfixturevalue("pg_url")
    store = open_store(url, 384, extra_migrations=INBOX_MIGRATIONS)
    yield Inbox(store, clock=lambda: NOW)
    store.close()


def note(inbox: Inbox, sender: str, n: int, channel: str = "telegram") -> int:
    entry = inbox.accept(Message(channel=channel, chat_id=sender, sender_id=sender, text="", timestamp=NOW,
                                 message_id=f"{sender}-{n}"))
    assert entry is not None
    return entry.seq


def test_waiting_is_bounded_per_sender_and_in_all_but_a_retry_is_kept(inbox):
    bounds = {"per_person": 2, "total": 3}
    ann = [note(inbox, "ann", n) for n in range(3)]
    assert [inbox.wait(s, "fetch failed", **bounds) for s in ann] == [1, 1, WAITING_FULL]
    assert inbox.counts() == {"waiting": 2, "pending": 1}  # the full one stays for the caller to close
    # The same id on another channel is another person.
    assert inbox.wait(note(inbox, "ann", 9, channel="wechat"), "fetch failed", **bounds) == 1
    assert inbox.wait(note(inbox, "bob", 0), "fetch failed", **bounds) == WAITING_FULL  # three wait in all
    # A message that waited before and is tried again is kept whatever waits meanwhile.
    inbox.store.write(lambda c: c.execute("UPDATE inbox SET status = 'pending' WHERE seq = ?", [ann[0]]))
    inbox.wait(note(inbox, "cid", 0), "fetch failed")  # no bounds: four wait now
    assert inbox.wait(ann[0], "fetch failed", **bounds) == 2


def test_a_read_begun_and_never_finished_is_not_begun_again(inbox):
    seq = note(inbox, "ann", 0)
    assert inbox.begin_reading(seq)
    inbox.end_reading(seq)
    assert inbox.begin_reading(seq)  # finished reads leave nothing behind
    # ... this one never finished (a limit, or the process died in it): from now on, never again.
    assert not inbox.begin_reading(seq)
    assert not inbox.begin_reading(seq)
