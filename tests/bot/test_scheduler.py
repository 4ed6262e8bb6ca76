"""The scheduler: state in DuckDB survives a restart, missed jobs run once, errors are recorded,
jobs never overlap themselves."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from bot.errors import ConfigError, StoreError
from bot.scheduler import (
    SCHEDULER_MIGRATIONS,
    JobSpec,
    JobStatus,
    Scheduler,
    format_duration,
    format_jobs,
    load_job_statuses,
)
from memory.embed import LocalE5Embedder
from memory.llm import Usage
from memory.store.rows import NewMemory, insert_memories
from memory.store.connection import Store
from memory.tasks.processor import TaskProcessor
from tests.fakes.clock import FakeClock

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


class NoLLM:
    """The close job below must not need a model: greeting-only tasks are skipped by rules."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.calls = 0

    async def complete(self, *a, **kw):
        self.calls += 1
        raise AssertionError("the LLM was called")

    async def complete_json(self, *a, **kw):
        self.calls += 1
        raise AssertionError("the LLM was called")


def open_store(path) -> Store:
    return Store(path, 384, extra_migrations=SCHEDULER_MIGRATIONS)


@pytest.fixture(scope="module")
def embedder():
    return LocalE5Embedder()


@pytest.fixture
def clock():
    return FakeClock(T0)


def greeting_chunks(store: Store, embedder, at: datetime) -> None:
    msgs = [("user", "hi"), ("assistant", "hello!"), ("user", "ok"), ("assistant", "bye")]
    rows = [NewMemory(space_id="u:1", kind="chunk", role=r, text=t, title=t, created_at=at + timedelta(minutes=i),
                      session_id="s1", turn_id="turn0") for i, (r, t) in enumerate(msgs)]
    store.write(lambda c: insert_memories(c, rows, embedder.embed_passages([r.text for r in rows])))


async def test_restart_resumes_and_runs_a_missed_close_once(tmp_path, embedder, clock):
    path = tmp_path / "m.duckdb"
    runs: list[datetime] = []
    closed: list[int] = []
    llm = NoLLM()

    def scheduler_for(store: Store) -> Scheduler:
        proc = TaskProcessor(store, embedder, llm, clock=clock.now)

        async def close_idle() -> None:
            runs.append(clock.now())
            closed.append(await proc.close_idle())

        return Scheduler(store, clock=clock.now, jobs=[JobSpec("close_idle_tasks", close_idle, timedelta(minutes=30))])

    with open_store(path) as store:                       # first start: never ran, so it runs now
        sched = scheduler_for(store)
        await sched.start()
        await sched.wait_idle()
        greeting_chunks(store, embedder, clock.now())
        await TaskProcessor(store, embedder, llm, clock=clock.now).assign("u:1")
        await sched.stop()
    assert runs == [T0] and closed == [0]

    clock.advance(hours=3)                                # down for 3 h: six runs missed
    with open_store(path) as store:
        sched = scheduler_for(store)
        await sched.start()
        await sched.wait_idle()
        (status,) = sched.status()
        await sched.stop()
        task = store.read(lambda c: c.execute("SELECT status, skip_reason FROM tasks").fetchone())
    assert runs == [T0, T0 + timedelta(hours=3)] and closed == [0, 1]     # once, not six times
    assert task == ("skipped", "too_short") and llm.calls == 0
    assert status.last_run == datetime(2026, 1, 1, 12, 0) and status.runs == 2 and status.last_error is None
    assert status.next_run is not None and status.next_run > datetime(2026, 1, 1, 12, 29)

    clock.advance(minutes=10)                             # restart before the next run is due: no run
    with open_store(path) as store:
        sched = scheduler_for(store)
        await sched.start()
        await sched.wait_idle()
        (status,) = sched.status()
        await sched.stop()
        stored = load_job_statuses(store)
    assert len(runs) == 2
    assert status.next_run is not None and abs(status.next_run - datetime(2026, 1, 1, 12, 30)) < timedelta(seconds=5)
    assert [(s.name, s.runs, s.last_run) for s in stored] == [("close_idle_tasks", 2, datetime(2026, 1, 1, 12, 0))]


async def test_a_failing_job_is_recorded_and_never_stops_the_others(tmp_path, clock):
    ok_runs: list[int] = []
    fail = [True]

    async def flaky() -> None:
        if fail[0]:
            raise RuntimeError("database is sad")

    async def fine() -> None:
        ok_runs.append(1)

    with open_store(tmp_path / "m.duckdb") as store:
        sched = Scheduler(store, clock=clock.now, jobs=[JobSpec("flaky", flaky, timedelta(hours=1)),
                                                        JobSpec("fine", fine, timedelta(hours=1))])
        await sched.start()
        await sched.wait_idle()
        by_name = {s.name: s for s in sched.status()}
        assert by_name["flaky"].last_error == "RuntimeError: database is sad" and by_name["flaky"].failures == 1
        assert by_name["fine"].last_error is None and ok_runs == [1]
        assert "error: RuntimeError: database is sad" in format_jobs(sched.status())
        fail[0] = False
        clock.advance(minutes=5)
        assert await sched.run_now("flaky") is True
        flaky_status = {s.name: s for s in sched.status()}["flaky"]
        await sched.stop()
    assert flaky_status.last_error is None and flaky_status.runs == 2 and flaky_status.failures == 1
    assert flaky_status.last_ok == datetime(2026, 1, 1, 9, 5)


async def test_a_job_never_overlaps_itself(tmp_path, clock):
    started, release = asyncio.Event(), asyncio.Event()
    count = [0]

    async def slow() -> None:
        count[0] += 1
        started.set()
        await release.wait()

    with open_store(tmp_path / "m.duckdb") as store:
        sched = Scheduler(store, clock=clock.now, jobs=[JobSpec("slow", slow, timedelta(hours=1))])
        await sched.start()                                # never ran: the catch-up run starts
        await asyncio.wait_for(started.wait(), 10)
        assert await sched.run_now("slow") is False        # still running: refused, not queued
        assert [s.running for s in sched.status()] == [True]
        assert "slow (every 1h): running" in format_jobs(sched.status())
        release.set()
        await sched.wait_idle()
        assert [s.running for s in sched.status()] == [False] and count[0] == 1
        await sched.stop()


async def test_apscheduler_fires_jobs_on_their_interval(tmp_path, clock):
    fired = asyncio.Event()
    runs = [0]

    async def tick() -> None:
        runs[0] += 1
        if runs[0] >= 2:
            fired.set()

    with open_store(tmp_path / "m.duckdb") as store:
        async with Scheduler(store, clock=clock.now, jobs=[JobSpec("tick", tick, timedelta(milliseconds=50))]) as sched:
            await asyncio.wait_for(fired.wait(), 10)       # the catch-up run, then APScheduler's own
            await sched.wait_idle()


async def test_stop_cancels_a_running_job(tmp_path, clock):
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with open_store(tmp_path / "m.duckdb") as store:
        sched = Scheduler(store, clock=clock.now, jobs=[JobSpec("forever", forever, timedelta(hours=1))])
        await sched.start()
        await asyncio.sleep(0)
        await sched.stop()
    assert cancelled.is_set()


async def test_a_store_without_the_scheduler_table_is_a_clear_error(tmp_path, clock):
    async def job() -> None:
        return None

    with Store(tmp_path / "m.duckdb", 384) as store:
        with pytest.raises(StoreError, match="SCHEDULER_MIGRATIONS"):
            await Scheduler(store, clock=clock.now, jobs=[JobSpec("a", job, timedelta(1))]).start()


def test_job_names_must_be_unique_and_intervals_positive(tmp_path):
    async def job() -> None:
        return None

    with open_store(tmp_path / "m.duckdb") as store:
        with pytest.raises(ConfigError, match="duplicate"):
            Scheduler(store, clock=datetime.now, jobs=[JobSpec("a", job, timedelta(1)), JobSpec("a", job, timedelta(1))])
        with pytest.raises(ConfigError, match="positive"):
            Scheduler(store, clock=datetime.now, jobs=[JobSpec("a", job, timedelta(0))])


def test_format_jobs():
    statuses = [
        JobStatus("close_idle_tasks", timedelta(minutes=10), datetime(2026, 1, 1, 9, 0), 0.42, None,
                  datetime(2026, 1, 1, 9, 10), False, runs=3),
        JobStatus("rebuild_fts", timedelta(hours=6), None, None, None, None, False),
    ]
    assert format_jobs(statuses).splitlines() == [
        "Jobs:",
        "- close_idle_tasks (every 10m): ok; last 2026-01-01 09:00 took 0.4s; next 2026-01-01 09:10; runs 3, failures 0",
        "- rebuild_fts (every 6h): not run yet; last never took -; next when a gateway runs; runs 0, failures 0",
    ]
    assert format_jobs([]) == "No scheduled jobs."
    assert [format_duration(x) for x in (None, 3.25, 42, 185, 7260)] == ["-", "3.2s", "42s", "3m05s", "2h01m"]
