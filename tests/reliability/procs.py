"""Real `memgate run` / `memgate chat` subprocesses for crash scenarios, and what they left behind.

Scenarios start the gateway as a person would, against the protocol fakes on 127.0.0.1, kill it
with SIGKILL at a chosen point, start it again, and then read the DuckDB file (or the PostgreSQL
database) to count what was stored. Waits are bounded only to turn a hang into a failure; nothing asserts timing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from memory.store.backend import open_store
from memory.store.url import duckdb_url, parse_store_url
from tests.fakes import brain
from tests.fakes.llm_server import Delay, Script

ROOT = str(Path(__file__).resolve().parents[2])
HANG = 3600.0  # a reply "still being generated" when the process is killed


def is_reply_request(req: dict) -> bool:
    """A request of the agent's own turn (not ingest, tasks or skills)."""
    return req["messages"][0]["content"].startswith("You are memgate")


def responder(*, slow_replies: bool) -> Callable[[dict], Script]:
    """The brain, with the agent's replies held back forever when `slow_replies`."""
    def respond(req: dict) -> Script:
        if slow_replies and is_reply_request(req):
            return Delay(HANG, brain.respond(req))
        return brain.respond(req)
    return respond


def memgate_env(tmp: Path, llm_base_url: str, config_toml: str = "", **extra: str) -> dict[str, str]:
    """The environment of a memgate process with its own data folder and config file."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "memgate.toml"
    config.write_text(config_toml)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_", "WECHAT_"))}
    env.update({"MEMGATE_CONFIG": str(config), "MEMGATE_DATA_DIR": str(tmp / "data"), "PYTHONPATH": ROOT,
                "MEMGATE_LLM_API_BASE": llm_base_url, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
                "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_DM_POLICY": "open",
                # The fake model serves any number of calls at once (not one, as a server on this
                # machine is assumed to): crash scenarios hold several replies in flight together.
                "MEMGATE_LLM_CONCURRENCY": "64",
                "MEMGATE_DELIVERY_RETRY_BASE_SECONDS": "0.2",
                "MEMGATE_DELIVERY_STORAGE_RETRY_SECONDS": "0.5"})
    env.update(extra)
    return env


async def start(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, env=env, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL: no shutdown code runs, exactly like a power cut of the process."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
    await proc.wait()


async def terminate(proc: asyncio.subprocess.Process, timeout: float = 120.0) -> int:
    """SIGTERM and wait for the clean exit (it answers what is queued first)."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        await kill(proc)
    return proc.returncode or 0


async def stderr_tail(proc: asyncio.subprocess.Process) -> str:
    if proc.stderr is None:
        return ""
    try:
        data = await asyncio.wait_for(proc.stderr.read(), 5)
    except TimeoutError:
        return ""
    return data.decode(errors="replace")[-3000:]


async def until(predicate: Callable[[], bool], what: str, timeout: float = 180.0,
                proc: asyncio.subprocess.Process | None = None) -> None:
    """Wait for a condition (checked every 20 ms); fail with `what` if it never holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if proc is not None and proc.returncode is not None:
            raise AssertionError(f"memgate exited ({proc.returncode}) before: {what}\n{await stderr_tail(proc)}")
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.02)


class _Onlooker:
    """One plain connection to the database the last check read, kept for the next (a scenario's
    waits check every 20 ms): opening the store for each check migrated it under the memory
    writers' lock, on three new connections, while the gateways under test wrote (measured at
    load 37: 19 ms of CPU a check, test and PostgreSQL, against under 1 ms; 200-350 ms against
    9-16 ms of wall, the writers' lock held for part of it)."""

    def __init__(self) -> None:
        self.conninfo: str | None = None
        self.conn = None

    def read(self, conninfo: str, sql: str) -> list[tuple]:
        import psycopg

        for attempt in (1, 2):
            if self.conn is None or self.conn.closed or self.conninfo != conninfo:
                self.close()
                self.conn, self.conninfo = psycopg.connect(conninfo, autocommit=True), conninfo
            try:
                return self.conn.execute(sql).fetchall()
            except psycopg.OperationalError:  # the server restarted (a scenario does that): once more, anew
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = self.conninfo = None


_onlooker = _Onlooker()


def rows(where: Path | str, sql: str) -> list[tuple]:
    """What `sql` reads from the store a run left: a data folder's DuckDB file, or a database URL
    (read as an onlooker, see _Onlooker)."""
    url = parse_store_url(duckdb_url(where / "memgate.duckdb") if isinstance(where, Path) else where)
    if url.backend == "postgresql":
        return _onlooker.read(url.conninfo, sql)
    store = open_store(url, 384)
    try:
        return store.read(lambda c: c.execute(sql).fetchall())
    finally:
        store.close()


def stored_user_texts(where: Path | str) -> list[str]:
    """Every user message captured in the durable ingest queue (what memory will hold)."""
    return [m["text"] for (payload,) in rows(where, "SELECT payload FROM ingest_queue")
            for m in json.loads(payload)["messages"] if m["role"] == "user"]


def inbox_statuses(data_dir: Path) -> dict[str, int]:
    return dict(rows(data_dir, "SELECT status, count(*) FROM inbox GROUP BY status"))


async def settle(predicate: Callable[[], bool], timeout: float = 90.0,
                 proc: asyncio.subprocess.Process | None = None) -> bool:
    """Wait until `predicate` holds; False after `timeout` (the scenario then counts what is missing)."""
    try:
        await until(predicate, "settle", timeout, proc)
    except AssertionError as exc:
        if "exited" in str(exc):
            raise
        return False
    return True


def tally(name: str, texts: list[str], answers: dict[str, int], stored: list[str], note: str = ""):
    """Counts for messages `texts`: answers[text] = replies seen, stored = user texts captured.

    A message is lost unless it was both answered and stored (once is enough for either).
    """
    from tests.reliability.harness import Counts

    answered = sum(1 for t in texts if answers.get(t, 0) >= 1)
    twice = sum(1 for t in texts if answers.get(t, 0) > 1)
    kept = sum(1 for t in texts if t in stored)
    lost = sum(1 for t in texts if not (answers.get(t, 0) >= 1 and t in stored))
    return Counts(scenario=name, messages_in=len(texts), answered=answered, stored=kept, lost=lost, leaked=0,
                  answered_twice=twice, note=note)
