"""The PostgreSQL store itself: migrations, transactions, the password from the environment,
filtered HNSW search that still returns k rows per space, and BM25 rankings equal to DuckDB's."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest

from memory.errors import StoreError, StoreWriteError
from memory.store.backend import open_store
from memory.store.connection import Store
from memory.store.keywords import keyword_candidates, rebuild_index
from memory.store.pg import PgStore
from memory.store.rows import NewMemory, ensure_space, insert_memories
from memory.store.vectors import vector_candidates

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 1, 1)


def test_migrations_apply_once_and_the_dimension_is_kept(pg_url):
    s = open_store(pg_url, 384)
    assert isinstance(s, PgStore) and s.backend == "postgresql"
    versions = s.read(lambda c: [r[0] for r in c.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()])
    s.close()
    again = open_store(pg_url, 128)  # the stored data decides the dimension
    assert again.dim == 384
    assert again.read(lambda c: [r[0] for r in c.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]) == versions
    again.close()


def test_a_failed_write_rolls_back_the_whole_transaction(pg_url):
    with open_store(pg_url, 384) as s:
        def half(con):
            s.meta_set(con, "a", "1")
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            s.write(half)
        assert s.meta_get("a") is None
        s.write(lambda c: s.meta_set(c, "a", "2"))
        s.write(lambda c: s.meta_set(c, "a", "3"))  # an upsert
        assert s.meta_get("a") == "3"


def test_a_refused_write_is_a_store_write_error(pg_url):
    """Issue 22 A3: a server that refuses writes (read-only, as a hot standby after a failover)
    raises StoreWriteError, what every caller treats as "not stored, try again later", whatever
    psycopg class the refusal has; a statement at fault (a typo) stays the bug it is."""
    with open_store(pg_url, 384) as s:
        def refused(con) -> None:
            con.execute("SET TRANSACTION READ ONLY")  # what a standby's every transaction is
            s.meta_set(con, "a", "1")

        with pytest.raises(StoreWriteError, match="read-only transaction"):
            s.write(refused)
        assert s.meta_get("a") is None
        with pytest.raises(psycopg.errors.UndefinedTable):
            s.write(lambda con: con.execute("INSERT INTO no_such_table VALUES (1)"))


def test_the_password_comes_from_the_environment_only(postgres, monkeypatch):
    with psycopg.connect(postgres.admin_url, autocommit=True) as c:
        c.execute("DROP ROLE IF EXISTS bob")
        c.execute("CREATE ROLE bob LOGIN PASSWORD 's3cret-pw'")
        c.execute("GRANT ALL ON SCHEMA public TO bob")
        schema = f"bob_{id(monkeypatch)}"
        c.execute(f"CREATE SCHEMA {schema} AUTHORIZATION bob")
        # The session's server trusts its socket: bob must give a password.
        hba = Path(c.execute("SHOW hba_file").fetchone()[0])
        if "local all bob scram-sha-256" not in hba.read_text():
            hba.write_text("local all bob scram-sha-256\n" + hba.read_text())
        c.execute("SELECT pg_reload_conf()")
    url = postgres.admin_url.replace("postgres@", "bob@") + f"&options=-csearch_path%3D{schema},public"
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("MEMGATE_STORE_PASSWORD", "wrong-pw")
    with pytest.raises(StoreError) as got:
        open_store(url, 384)
    assert "password authentication failed" in str(got.value)
    assert "\n" not in str(got.value) and "wrong-pw" not in str(got.value)
    with pytest.raises(StoreError) as got:
        open_store(url.replace("bob@", "bob:s3cret-pw@"), 384)
    assert "s3cret-pw" not in str(got.value)
    monkeypatch.setenv("MEMGATE_STORE_PASSWORD", "s3cret-pw")
    with open_store(url, 384) as s:
        s.write(lambda con: s.meta_set(con, "who", "bob"))
        assert s.meta_get("who") == "bob"
    monkeypatch.delenv("MEMGATE_STORE_PASSWORD")
    monkeypatch.setenv("PGPASSWORD", "s3cret-pw")  # libpq's own variable works too
    open_store(url, 384).close()


def _unit(rng, n, dim=384):
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _fill(store, spaces: dict[str, int], rng) -> dict[str, np.ndarray]:
    out = {}

    def go(con):
        for space, n in spaces.items():
            ensure_space(con, space, "user", None, T0)
            vecs = _unit(rng, n)
            rows = [NewMemory(space_id=space, kind="fact", text=f"{space} note {i} " + " ".join(
                        rng.choice(["cello", "orchestra", "monday", "garden", "tomato", "rain", "bus"], 4)),
                        title="", created_at=T0, id=f"{space}-{i}") for i in range(n)]
            insert_memories(con, rows, vecs)
            out[space] = vecs
    store.write(go)
    return out


def test_a_small_space_still_gets_k_rows_from_the_hnsw_index(pg_url):
    rng = np.random.default_rng(1)
    with open_store(pg_url, 384) as s:
        vecs = _fill(s, {"big": 3000, "small": 30}, rng)
        plan = s.read(lambda c: "\n".join(r[0] for r in c.execute(
            "EXPLAIN SELECT id FROM memories ORDER BY embedding <=> ?::vector(384) LIMIT 10",
            [str(vecs["small"][0].tolist())]).fetchall()))
        assert "memories_embedding_hnsw" in plan
        q = vecs["small"][3]
        got = s.read(lambda c: vector_candidates(c, q, ["small"], 10))
        assert len(got) == 10 and all(i.startswith("small-") for i, _ in got)
        exact = sorted(((f"small-{k}", float(v @ q)) for k, v in enumerate(vecs["small"])), key=lambda x: (-x[1], x[0]))[:10]
        assert [i for i, _ in got] == [i for i, _ in exact]
        assert got[0][0] == "small-3" and got[0][1] == pytest.approx(1.0, abs=1e-5)


def test_keyword_rankings_equal_duckdbs(pg_url, tmp_path):
    with open_store(pg_url, 384) as pg, Store(tmp_path / "m.duckdb", 384) as duck:
        for s in (pg, duck):
            _fill(s, {"a": 200, "b": 50}, np.random.default_rng(7))
        for s in (pg, duck):
            rebuild_index(s)
        # Rows after the build are scored directly; they rank with the indexed ones.
        for s in (pg, duck):
            _fill(s, {"c": 5}, np.random.default_rng(8))
        for terms in (["cello"], ["orchestra", "monday"], ["tomatoes", "Garden"], ["rain", "bus", "cello"]):
            for spaces in (["a"], ["b", "c"], ["a", "b", "c"]):
                want = duck.read(lambda c: keyword_candidates(c, terms, spaces, 15))
                got = pg.read(lambda c: keyword_candidates(c, terms, spaces, 15))
                assert [i for i, _ in got] == [i for i, _ in want], (terms, spaces)
                assert [round(x, 9) for _, x in got] == [round(x, 9) for _, x in want]
                assert want


def test_pulse_is_the_same_on_both_backends(pg_url, tmp_path):
    from datetime import timedelta

    from memory.store.pulse import pulse

    got = []
    with open_store(pg_url, 384) as pg, Store(tmp_path / "m.duckdb", 384) as duck:
        for s in (pg, duck):
            rows = [NewMemory(space_id="a", kind=k, text=f"t{i}", title="", created_at=T0 + timedelta(hours=13 * i),
                              category=c, tags=tags, id=f"m{i}")
                    for i, (k, c, tags) in enumerate([("fact", "pref", ("x", "y")), ("chunk", None, ()), ("fact", "pref", ("x",)),
                                                      ("task", "work", ("y", "x")), ("fact", None, ("z",))])]
            s.write(lambda con, rows=rows: insert_memories(con, rows, _unit(np.random.default_rng(0), len(rows))))
            for bucket in ("day", "week"):
                got.append(s.read(lambda con, b=bucket: pulse(con, "a", T0 - timedelta(days=2), T0 + timedelta(days=9), b)))
    assert got[:2] == got[2:]
    assert got[0].total == 5 and got[0].top_tags[0] == ("x", 3) and len(got[0].buckets) == 11


def test_writers_in_two_processes_commit_in_seq_order(pg_url):
    """A second store (another process's pool) cannot commit between another writer's nextval
    and its commit: the seq watermark the caches keep never skips a row."""
    import threading

    with open_store(pg_url, 384) as a, open_store(pg_url, 384) as b:
        _fill(a, {"x": 1}, np.random.default_rng(0))
        inside, release = threading.Event(), threading.Event()

        def slow(con):
            con.execute("UPDATE memories SET seq = nextval('memory_seq') WHERE id = 'x-0'")
            inside.set()
            release.wait(10)

        t = threading.Thread(target=a.write, args=(slow,))
        t.start()
        inside.wait(10)
        done = []
        u = threading.Thread(target=lambda: done.append(_fill(b, {"y": 1}, np.random.default_rng(1))))
        u.start()
        # b queues behind a's advisory lock (polled: nothing here depends on how long it takes)
        waiting = 0
        for _ in range(200):
            waiting = a.read(lambda c: c.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0])
            if waiting:
                break
            threading.Event().wait(0.05)
        assert waiting == 1 and not done
        release.set()
        t.join(10)
        u.join(10)
        seqs = dict(a.read(lambda c: c.execute("SELECT id, seq FROM memories").fetchall()))
        assert seqs["x-0"] < seqs["y-0"]
