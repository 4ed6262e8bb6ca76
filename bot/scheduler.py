"""Background jobs on APScheduler 3.11's AsyncIOScheduler, with their state in DuckDB.

Each job is an async function run every `interval`. What ran when lives in the table
`scheduler_jobs`, so a restart resumes the schedule: a job whose `last_run + interval` passed
while the process was down runs once at start (coalesced, however many runs were missed), and
one that is not due yet keeps its place. A job never overlaps itself (APScheduler's
max_instances=1, plus our own guard that also covers `run_now`). A job's exception is recorded
and logged; it never stops the scheduler or the other jobs.

`clock` is the wall time used for the records and the due check (a fake clock in tests);
APScheduler fires on real time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from bot.errors import ConfigError, StoreError
from bot.job_views import JobStatus, format_duration, format_interval, format_jobs  # noqa: F401 (re-exported)
from memory.erase import EraseRules, Kept
from memory.store.connection import Conn, Migration, Store
from memory.store.locks import LockSpace, lock_key
from memory.store.rows import utc_naive

log = logging.getLogger(__name__)

# Versions 100+ belong to the scheduler, so they never clash with memory's migrations.
SCHEDULER_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        100,
        "scheduler jobs",
        """
        CREATE TABLE scheduler_jobs (
            name VARCHAR PRIMARY KEY,
            last_run TIMESTAMP,             -- when the last finished run started (naive UTC)
            duration_s DOUBLE,
            last_error VARCHAR,             -- NULL when the last run succeeded
            last_ok TIMESTAMP,
            runs BIGINT NOT NULL DEFAULT 0,
            failures BIGINT NOT NULL DEFAULT 0
        );
        """,
    ),
)
SCHEDULER_ERASE = EraseRules(kept=(Kept("scheduler_jobs", "when each background job ran: no one's words"),))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One periodic job: a name, an async function and how often it runs."""

    name: str
    func: Callable[[], Awaitable[object]]
    interval: timedelta


@dataclass
class _State:
    last_run: datetime | None = None
    duration_s: float | None = None
    last_error: str | None = None
    last_ok: datetime | None = None
    runs: int = 0
    failures: int = 0


_ERROR_CHARS = 500


def _load_states(con: Conn) -> dict[str, _State]:
    if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'scheduler_jobs'").fetchone()[0]:
        raise StoreError("the scheduler_jobs table is missing: open the Store with extra_migrations=SCHEDULER_MIGRATIONS")
    rows = con.execute(
        "SELECT name, last_run, duration_s, last_error, last_ok, runs, failures FROM scheduler_jobs").fetchall()
    return {r[0]: _State(*r[1:]) for r in rows}


def _save_state(con: Conn, name: str, s: _State) -> None:
    con.execute(
        "INSERT INTO scheduler_jobs (name, last_run, duration_s, last_error, last_ok, runs, failures) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run, "
        "duration_s = excluded.duration_s, last_error = excluded.last_error, last_ok = excluded.last_ok, "
        "runs = excluded.runs, failures = excluded.failures",
        [name, s.last_run, s.duration_s, s.last_error, s.last_ok, s.runs, s.failures])


def load_job_statuses(store: Store, jobs: Sequence[JobSpec] = ()) -> list[JobStatus]:
    """The stored job records, for `memgate jobs` when no gateway is running (blocking)."""
    states = store.read(_load_states)
    intervals = {j.name: j.interval for j in jobs}
    names = list(intervals) + sorted(n for n in states if n not in intervals)
    out = []
    for name in names:
        s = states.get(name, _State())
        iv = intervals.get(name)
        nxt = s.last_run + iv if s.last_run is not None and iv is not None else None
        out.append(JobStatus(name, iv, s.last_run, s.duration_s, s.last_error, nxt, False, s.runs, s.failures, s.last_ok))
    return out


class Scheduler:
    """Runs the periodic jobs in the gateway's event loop; usable as `async with`."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime], jobs: Sequence[JobSpec]) -> None:
        names = [j.name for j in jobs]
        if len(set(names)) != len(names):
            raise ConfigError(f"scheduler: duplicate job names {sorted(names)}")
        for j in jobs:
            if j.interval <= timedelta(0):
                raise ConfigError(f"scheduler: job {j.name} needs a positive interval")
        self.store = store
        self._clock = clock
        self._specs = {j.name: j for j in jobs}
        self._states: dict[str, _State] = {name: _State() for name in names}
        self._running: dict[str, asyncio.Task] = {}
        self._catchup: list[asyncio.Task] = []
        self._aps: AsyncIOScheduler | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the job records, schedule every job, and run the ones missed while down."""
        if self._aps is not None:
            raise RuntimeError("scheduler already started")
        stored = await self.store.aread(_load_states)
        self._states.update({k: v for k, v in stored.items() if k in self._specs})
        now = utc_naive(self._clock())
        real_now = datetime.now(UTC)
        aps = AsyncIOScheduler(timezone=UTC, job_defaults={"max_instances": 1, "coalesce": True,
                                                           "misfire_grace_time": None})
        due: list[str] = []
        for name, spec in self._specs.items():
            last = self._states[name].last_run
            wait = (last + spec.interval - now) if last is not None else timedelta(0)
            if wait <= timedelta(0):
                due.append(name)
                wait = spec.interval
            aps.add_job(self._fire, IntervalTrigger(seconds=spec.interval.total_seconds(), start_date=real_now + wait,
                                                    timezone=UTC),
                        args=[name], id=name, name=name)
        aps.start()
        self._aps = aps
        for name in due:
            log.info("job %s is due (missed or never run): running it now", name)
            # As a timer's fire, not `run_now`: on a shared database another process starting in
            # the same moment catches up too, and the job's lock plus the record re-read under it
            # let only the first run it (the other finds it run since it was due).
            self._catchup.append(asyncio.create_task(self._fire(name), name=f"job-catchup-{name}"))
        log.info("scheduler started with %d job(s)", len(self._specs))

    async def stop(self) -> None:
        """Stop scheduling and cancel running jobs (their work state is in the database)."""
        aps, self._aps = self._aps, None
        if aps is not None and aps.running:
            aps.shutdown(wait=False)
        tasks = [t for t in (*self._catchup, *self._running.values()) if not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._catchup.clear()
        await asyncio.sleep(0)  # AsyncIOScheduler shuts down through call_soon_threadsafe
        log.info("scheduler stopped")

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_idle(self) -> None:
        """Wait for the start-up catch-up runs and any running job to finish."""
        while True:
            tasks = [t for t in (*self._catchup, *self._running.values()) if not t.done()]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- running -----------------------------------------------------------------------------
    async def run_now(self, name: str) -> bool:
        """Run a job now in the caller's task; False when it is already running (no overlap),
        in this process or, on a shared database, in another one."""
        return await self._run(name, only_if_due=False)

    async def _fire(self, name: str) -> bool:
        return await self._run(name, only_if_due=True)

    async def _run(self, name: str, *, only_if_due: bool) -> bool:
        spec = self._specs.get(name)
        if spec is None:
            raise KeyError(f"no job named {name!r}")
        if name in self._running:
            log.info("job %s is still running; not starting it again", name)
            return False
        task = asyncio.current_task()
        assert task is not None
        self._running[name] = task
        # Every process on a shared database schedules every job; the one holding the job's lock
        # runs it, and a fire that finds it run (by another process) since it was due skips it.
        # One DuckDB process: APScheduler's timer and the guard above are the whole story.
        shared = self.store.backend != "duckdb"
        key = lock_key(f"job:{name}")
        try:
            if shared:
                if not await asyncio.to_thread(self.store.locks.try_hold, LockSpace.JOB, key):
                    log.info("job %s is running in another process; not starting it here", name)
                    return False
                stored = (await self.store.aread(_load_states)).get(name)
                if stored is not None:
                    self._states[name] = stored
                last = self._states[name].last_run
                # A tenth of the interval of slack: each process's timer drifts from the others'.
                if only_if_due and last is not None and utc_naive(self._clock()) < last + spec.interval * 0.9:
                    log.debug("job %s already ran at %s; not due here yet", name, last)
                    return False
            started = utc_naive(self._clock())
            t0 = time.perf_counter()
            error: str | None = None
            try:
                await spec.func()
            except Exception as exc:  # a job's failure is recorded, never fatal to the scheduler
                error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
                log.exception("job %s failed", name)
            self._running.pop(name, None)
            await self._record(name, started, time.perf_counter() - t0, error)
            return True
        finally:
            self._running.pop(name, None)
            if shared:
                await asyncio.to_thread(self.store.locks.release, LockSpace.JOB, key)

    async def _record(self, name: str, started: datetime, duration: float, error: str | None) -> None:
        s = self._states[name]
        s.last_run, s.duration_s, s.last_error = started, round(duration, 3), error
        s.runs += 1
        if error is None:
            s.last_ok = started
        else:
            s.failures += 1
        try:
            await self.store.awrite(lambda c: _save_state(c, name, s))
        except Exception:  # the record is lost, the schedule is not
            log.warning("could not save the state of job %s", name, exc_info=True)
        log.info("job %s finished in %.2fs%s", name, duration, " with an error" if error else "")

    # --- status ------------------------------------------------------------------------------
    @property
    def specs(self) -> list[JobSpec]:
        """The jobs this scheduler runs (their names and intervals, for `memgate jobs` offline)."""
        return list(self._specs.values())

    def status(self) -> list[JobStatus]:
        """Every job's last run, duration, error, next run (in clock time) and whether it runs now."""
        now = self._clock()
        real_now = datetime.now(UTC)
        out = []
        for name, spec in self._specs.items():
            s = self._states[name]
            nxt: datetime | None = None
            job = self._aps.get_job(name) if self._aps is not None else None
            if job is not None and job.next_run_time is not None:
                nxt = utc_naive(now + (job.next_run_time - real_now))
            elif s.last_run is not None:
                nxt = s.last_run + spec.interval
            out.append(JobStatus(name, spec.interval, s.last_run, s.duration_s, s.last_error, nxt,
                                 name in self._running, s.runs, s.failures, s.last_ok))
        return out


