"""Issue 22 A6: ingest_queue rows were never emptied, every turn's words kept forever. An
ingested turn keeps only its receipt once nothing reads its words (session history, the next
turn's context); on both backends, measured in bytes per turn."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from bot.turn.sessions import HISTORY_TURNS
from memory.ingest.capture import CapturedTurn, TurnMessage, capture
from memory.ingest.queue import prune_turn_text
from memory.store.backend import open_store
from memory.store.connection import Store

T0 = datetime(2026, 1, 1, 9)
WORDS = "I keep the spare key of the shed under the blue flower pot by the back door. " * 6


def _fill(store) -> None:
    """An old session of 30 turns, a recent session of 30 turns, and one turn not ingested yet."""
    for session, start, n in (("s_old", T0, 30), ("s_now", T0 + timedelta(days=30), 30)):
        for i in range(n):
            at = start + timedelta(minutes=i)
            capture(store, CapturedTurn(space_id="u_a", session_id=session, turn_id=f"{session}:{i}", created_at=at,
                                        messages=(TurnMessage("user", f"{i}: {WORDS}"), TurnMessage("assistant", "Noted."))))
    capture(store, CapturedTurn(space_id="u_a", session_id="s_now", turn_id="s_now:pending",
                                created_at=T0 + timedelta(days=30, hours=1), messages=(TurnMessage("user", WORDS),)))
    store.write(lambda c: c.execute("UPDATE ingest_queue SET status = 'done', done_at = created_at + INTERVAL '1 minute' "
                                    "WHERE turn_id <> 's_now:pending'"))


def _payload_bytes(store) -> int:
    return store.read(lambda c: c.execute("SELECT sum(length(payload)) FROM ingest_queue").fetchone()[0])


def _check(store) -> tuple[int, int]:
    _fill(store)
    before = _payload_bytes(store)
    # Every turn was ingested before the cutoff; the recent session saw a turn after it.
    cutoff = T0 + timedelta(days=30, minutes=40)
    assert store.write(lambda c: prune_turn_text(c, cutoff, HISTORY_TURNS)) == 30 + 11
    assert store.write(lambda c: prune_turn_text(c, cutoff, HISTORY_TURNS)) == 0  # once is enough
    kept = dict(store.read(lambda c: c.execute("SELECT turn_id, payload FROM ingest_queue").fetchall()))
    assert len(kept) == 61  # every receipt stays: a repeated capture is still recognised
    words = {t for t, p in kept.items() if json.loads(p)["messages"]}
    # The recent session's latest 20 turns (its history, the one not ingested yet included) keep their words.
    assert words == {f"s_now:{i}" for i in range(11, 30)} | {"s_now:pending"}
    assert all("created_at" in json.loads(p) for p in kept.values())
    capture(store, CapturedTurn(space_id="u_a", session_id="s_old", turn_id="s_old:3", created_at=T0,
                                messages=(TurnMessage("user", WORDS),)))  # captured again (a retried turn)
    assert store.read(lambda c: c.execute("SELECT count(*) FROM ingest_queue").fetchone()[0]) == 61
    return before, _payload_bytes(store)


def test_ingested_turns_keep_only_their_receipts_on_duckdb(tmp_path):
    with Store(tmp_path / "m.duckdb", 384) as store:
        before, after = _check(store)
    print(f"duckdb payload bytes per turn: {before / 61:.0f} -> {after / 61:.0f}")
    assert after < before / 2


@pytest.mark.postgres
def test_ingested_turns_keep_only_their_receipts_on_postgres(pg_url):
    with open_store(pg_url, 384) as store:
        before, after = _check(store)
    print(f"postgres payload bytes per turn: {before / 61:.0f} -> {after / 61:.0f}")
    assert after < before / 2
