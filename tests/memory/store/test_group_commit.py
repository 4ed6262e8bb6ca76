"""DuckDB group commit (Store.write): writes queued while the writer is busy share one
transaction and one COMMIT, each returning its own value only after that COMMIT; a write that
raises costs the others nothing (the group is rolled back and each runs alone)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from memory.store.connection import Store


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "memory.duckdb", 384) as s:
        s.write(lambda c: c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, txid BIGINT)"))
        yield s


def _queued_behind_a_busy_writer(store: Store, fns: list) -> list:
    """Run `fns` from threads while a write holds the writer; they queue, then run together."""
    started, release = threading.Event(), threading.Event()

    def busy(con):
        started.set()
        release.wait(30)

    with ThreadPoolExecutor(len(fns) + 1) as pool:
        first = pool.submit(store.write, busy)
        assert started.wait(30)
        futures = [pool.submit(store.write, fn) for fn in fns]
        while len(store._queued) < len(fns):  # every one waits for the writer
            threading.Event().wait(0.005)
        release.set()
        first.result(30)
        return [f.exception(30) or f.result(30) for f in futures]


def _insert(k: int):
    def fn(con):
        txid = con.execute("SELECT txid_current()").fetchone()[0]
        con.execute("INSERT INTO t VALUES (?, ?)", [k, txid])
        return k * 10
    return fn


def test_queued_writes_share_one_transaction_and_each_gets_its_own_value(store):
    results = _queued_behind_a_busy_writer(store, [_insert(k) for k in range(12)])
    assert results == [k * 10 for k in range(12)]
    rows = store.read(lambda c: c.execute("SELECT k, txid FROM t ORDER BY k").fetchall())
    assert [k for k, _ in rows] == list(range(12))
    assert len({txid for _, txid in rows}) == 1  # one transaction, so one COMMIT (one WAL fsync)


def test_a_failing_write_costs_the_rest_of_its_group_nothing(store):
    def bad(con):
        con.execute("INSERT INTO t VALUES (100, 0)")
        raise ValueError("refused by its own function")

    def duplicate(con):
        con.execute("INSERT INTO t VALUES (1, 0)")  # k=1 is written by another write of the group

    results = _queued_behind_a_busy_writer(store, [_insert(0), bad, _insert(1), duplicate, _insert(2)])
    assert results[0] == 0 and results[2] == 10 and results[4] == 20
    assert isinstance(results[1], ValueError)
    assert "constraint" in str(results[3]).lower()
    rows = store.read(lambda c: c.execute("SELECT k, txid FROM t ORDER BY k").fetchall())
    assert [k for k, _ in rows] == [0, 1, 2]  # the failing writes left nothing behind
    assert len({txid for _, txid in rows}) == 3  # after the failure each ran alone, in order


def test_a_write_inside_a_schema_change_runs_alone(store):
    """A migration's write is not joined by writes of other threads (its DDL runs by itself)."""
    with store.schema_change("test"):
        got = []
        other = threading.Thread(target=lambda: got.append(store.write(_insert(7))))
        other.start()
        while not store._queued:
            threading.Event().wait(0.005)
        assert store.write(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 0
    other.join(30)
    assert got == [70]
