"""Identity linking over a real DuckDB file."""

from __future__ import annotations

import numpy as np
import pytest

from bot.access import ACCESS_MIGRATIONS, AccessError
from memory.store.connection import Store
from memory.store.rows import NewMemory, insert_memories
from tests.fakes.people import dm, group, make


@pytest.fixture
def astore(tmp_path):
    s = Store(tmp_path / "access.duckdb", 384, extra_migrations=ACCESS_MIGRATIONS)
    yield s
    s.close()


async def test_link_shares_one_space_and_moves_memories(astore, clock):
    doors = make(astore, clock, dm_policy="open")
    tg = (await doors.access.check(dm("1", name="Ann"))).identity
    wx = (await doors.access.check(dm("wx1", channel="wechat", name="Ann"))).identity
    old = wx.space_id
    now = clock.now()
    rows = [NewMemory(space_id=old, kind="fact", text=f"fact {i}", title=f"fact {i}", created_at=now) for i in range(3)]
    insert_memories(astore._con, rows, np.full((3, 384), 0.05, dtype=np.float32))

    def seed(con):
        con.execute("INSERT INTO tasks (id, space_id, started_at, last_at) VALUES ('t_1', ?, ?, ?)", [old, now, now])
        con.execute("INSERT INTO ingest_queue (id, space_id, turn_id, payload, next_attempt_at, created_at) "
                    "VALUES ('q_1', ?, 'turn1', '{}', ?, ?)", [old, now, now])
    astore.write(seed)

    code = await doors.linking.link_code(tg)
    with pytest.raises(AccessError, match="yours"):
        await doors.linking.redeem_link(code, tg)
    joined = await doors.linking.redeem_link(code, wx)
    assert joined.space_id == tg.space_id and joined.key == wx.key

    ok = await doors.access.check(dm("wx1", channel="wechat", name="Ann"))
    assert ok.space_ids == (tg.space_id, "public") and ok.write_space == tg.space_id
    counts = astore.read(lambda c: c.execute(
        "SELECT (SELECT count(*) FROM memories WHERE space_id = $o) + (SELECT count(*) FROM tasks WHERE space_id = $o)"
        " + (SELECT count(*) FROM ingest_queue WHERE space_id = $o),"
        " (SELECT count(*) FROM memories WHERE space_id = $n), (SELECT count(*) FROM tasks WHERE space_id = $n)",
        {"o": old, "n": tg.space_id}).fetchone())
    assert counts == (0, 3, 1)
    with pytest.raises(AccessError):
        await doors.linking.redeem_link(code, wx)                               # one-time


async def test_link_code_expires_and_needs_a_known_identity(astore, clock):
    doors = make(astore, clock, dm_policy="open", group_policy="open")
    a = (await doors.access.check(dm("1"))).identity
    b = (await doors.access.check(dm("2"))).identity
    code = await doors.linking.link_code(a)
    clock.advance(minutes=11)
    with pytest.raises(AccessError, match="expired"):
        await doors.linking.redeem_link(code, b)
    stranger = (await doors.access.check(group("-5", "77"))).identity           # unknown group member
    with pytest.raises(AccessError):
        await doors.linking.link_code(stranger)
    fresh = await doors.linking.link_code(a)
    with pytest.raises(AccessError):
        await doors.linking.redeem_link(fresh, stranger)
    newer = await doors.linking.link_code(a)
    with pytest.raises(AccessError):
        await doors.linking.redeem_link(fresh, b)                                # replaced by the newer code
    assert (await doors.linking.redeem_link(newer, b)).space_id == a.space_id
