"""Processes sharing one PostgreSQL: the locks that end with their process, worker numbers, one
receiver per bot, conversation adoption, and a scheduler job run once whichever process fires it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta

import pytest

from bot.delivery.cluster import Cluster
from bot.delivery.inbox import INBOX_MIGRATIONS
from bot.delivery.outbox import OUTBOX_MIGRATIONS
from bot.scheduler import SCHEDULER_MIGRATIONS, JobSpec, Scheduler
from memory.store.backend import open_store
from memory.store.locks import LockSpace

pytestmark = pytest.mark.postgres
MIGRATIONS = (*INBOX_MIGRATIONS, *OUTBOX_MIGRATIONS, *SCHEDULER_MIGRATIONS)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _store(url):
    return open_store(url, 384, extra_migrations=MIGRATIONS)


def _now() -> datetime:
    return datetime.now(UTC)


def test_a_lock_has_one_holder_and_is_free_the_moment_its_process_is_killed(pg_url):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from memory.store.backend import open_store
        from memory.store.locks import LockSpace
        s = open_store({pg_url!r}, 384)
        assert s.locks.try_hold(LockSpace.LEADER, 7)
        print("held", flush=True)
        time.sleep(600)
    """)], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with _store(pg_url) as other:
            assert not other.locks.try_hold(LockSpace.LEADER, 7)
            assert 7 in other.locks.held(LockSpace.LEADER)
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            # The server ends the killed process's session as soon as its socket closes.
            for _ in range(200):
                if other.locks.try_hold(LockSpace.LEADER, 7):
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("the lock of a killed process was never freed")
            assert other.locks.held(LockSpace.LEADER) == {7}
    finally:
        holder.kill()


def test_locks_of_one_schema_are_not_seen_from_another(postgres):
    (s1, url1), (s2, url2) = postgres.fresh_schema(), postgres.fresh_schema()
    try:
        with _store(url1) as a, _store(url2) as b:
            assert a.locks.try_hold(LockSpace.WORKER, 1)
            assert b.locks.held(LockSpace.WORKER) == set()
            assert b.locks.try_hold(LockSpace.WORKER, 1)
    finally:
        postgres.drop_schema(s1)
        postgres.drop_schema(s2)


def test_workers_get_distinct_numbers_and_adopt_only_the_dead_ones_conversations(pg_url):
    with _store(pg_url) as sa, _store(pg_url) as sb, _store(pg_url) as sc:
        a, b, c = (Cluster(s, clock=_now) for s in (sa, sb, sc))
        assert len({a.join(), b.join(), c.join()}) == 3
        sa.write(lambda con: con.execute(
            "INSERT INTO inbox (seq, channel, platform_key, conversation_key, message, status, received_at) VALUES "
            "(1, 'telegram', 'k1', 'telegram:1', '{}', 'pending', now()), "
            "(2, 'telegram', 'k2', 'telegram:2', '{}', 'pending', now())"))
        sa.write(lambda con: a.own(con, "telegram:1"))
        sb.write(lambda con: b.own(con, "telegram:2"))
        assert c.adopt(["telegram"]) == []  # both owners alive
        sa.locks.close()  # a's process gone: its session, and so its worker lock, ends
        _until_gone(c, a.worker)  # the server ends the session a moment after the socket closes
        assert c.adopt(["telegram"]) == ["telegram:1"]
        assert c.adopt(["telegram"]) == []  # adopted once
        assert b.adopt(["wechat"]) == []  # only conversations of channels the adopter receives


def _until_gone(cluster: Cluster, worker: int) -> None:
    for _ in range(400):
        if worker not in cluster.alive():
            return
        time.sleep(0.01)
    raise AssertionError(f"worker {worker}'s lock outlived its session")


def test_a_restarted_process_adopts_its_dead_predecessors_work(pg_url):
    """Issue 22 A1: the restart takes the dead process's number, and so must see its conversations
    as orphans (its own, and another live process's view of them), never as its own live work."""
    with _store(pg_url) as sa, _store(pg_url) as sb:
        old, other = Cluster(sa, clock=_now), Cluster(sb, clock=_now)
        n = old.join()
        other.join()
        sa.write(lambda con: con.execute(
            "INSERT INTO inbox (seq, channel, platform_key, conversation_key, message, status, received_at) "
            "VALUES (1, 'telegram', 'k1', 'telegram:1', '{}', 'pending', now())"))
        sa.write(lambda con: old.own(con, "telegram:1"))
        sa.locks.close()  # SIGKILL: the session ends, the number is free
        _until_gone(other, n)
    with _store(pg_url) as sc, _store(pg_url) as sb:
        restarted, other = Cluster(sc, clock=_now), Cluster(sb, clock=_now)
        assert restarted.join() == n  # the smallest free number: the dead one's
        other.join()
        mine, params = restarted.mine_sql()
        assert sc.read(lambda c: c.execute(f"SELECT count(*) FROM conversation_owners WHERE {mine}", params).fetchone()[0]) == 0
        assert restarted.adopt(["telegram"]) == ["telegram:1"]
        assert other.adopt(["telegram"]) == []  # owned by a live incarnation now
        assert restarted.adopt(["telegram"]) == []


def test_one_receiver_per_bot_and_the_standby_takes_over(pg_url):
    with _store(pg_url) as sa, _store(pg_url) as sb:
        a, b = Cluster(sa, clock=_now), Cluster(sb, clock=_now)
        assert a.lead("telegram:abc") and not b.lead("telegram:abc")
        assert b.lead("telegram:other")  # another bot has a receiver of its own
        a.resign("telegram:abc")
        assert b.lead("telegram:abc")


async def test_a_job_fired_in_two_processes_runs_once(pg_url):
    runs: list[str] = []
    gate = asyncio.Event()

    def job(who: str):
        async def run() -> None:
            runs.append(who)
            await gate.wait()
        return run

    with _store(pg_url) as sa, _store(pg_url) as sb:
        first = Scheduler(sa, clock=_now, jobs=[JobSpec("digest", job("a"), timedelta(hours=1))])
        second = Scheduler(sb, clock=_now, jobs=[JobSpec("digest", job("b"), timedelta(hours=1))])
        running = asyncio.create_task(first._fire("digest"))
        while not runs:
            await asyncio.sleep(0.01)
        assert await second.run_now("digest") is False  # running in the other process
        gate.set()
        assert await running is True
        assert await second._fire("digest") is False  # its timer fires just after: already run, not due
        assert runs == ["a"]


async def test_the_start_up_catch_up_runs_once_when_two_processes_start_together(pg_url):
    """Issue 22 A4: both processes find `digest` due at start (never run): it runs in one, even
    when the second asks for the job's lock only after the first has finished and let it go."""
    import threading

    runs: list[str] = []
    gate = asyncio.Event()
    first_done = threading.Event()

    def job(who: str):
        async def run() -> None:
            runs.append(who)
            await gate.wait()
        return run

    with _store(pg_url) as sa, _store(pg_url) as sb:
        real_try_hold = sb.locks.try_hold

        def late_try_hold(space, key):  # the second process is slower to reach the lock
            first_done.wait(30)
            return real_try_hold(space, key)

        sb.locks.try_hold = late_try_hold
        first = Scheduler(sa, clock=_now, jobs=[JobSpec("digest", job("a"), timedelta(hours=1))])
        second = Scheduler(sb, clock=_now, jobs=[JobSpec("digest", job("b"), timedelta(hours=1))])
        await first.start()
        try:
            while not runs:
                await asyncio.sleep(0.01)
            await second.start()  # finds it due: the first has not finished, nothing is recorded
            gate.set()
            await first.wait_idle()
            first_done.set()
            await second.wait_idle()
        finally:
            first_done.set()
            await first.stop()
            await second.stop()
        assert runs == ["a"]
