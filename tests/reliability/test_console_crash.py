"""The console: SIGKILL of `memgate chat` while a reply is being generated (and right after one
was printed); every line it had read must be answered once and stored after the restart."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from memory.store.connection import Store
from tests.fakes import brain
from tests.fakes.llm_server import Delay, FakeLLM
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import (HANG, is_reply_request, kill, memgate_env, settle, start, stored_user_texts,
                                     tally, terminate, until)

# Real processes started twice each, on a machine that may be busy: far above pytest's default.
pytestmark = pytest.mark.timeout(600)

MESSAGES = ("My grandmother Rosalind lives in Porto.", "I am allergic to hazelnuts.",
            "My bike is a green Bianchi from 1988.")


class Transcript:
    """Reads the bot's lines ("memgate: ...") from a chat process as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.replies: list[str] = []
        self._task = asyncio.create_task(self._read(proc))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            text = line.decode(errors="replace")
            if text.startswith("memgate: "):
                self.replies.append(text[len("memgate: "):].strip())

    def answers(self) -> dict[str, int]:
        # The brain's reply echoes the message: "... You said: <message>".
        return {m: sum(1 for r in self.replies if r.endswith(f"You said: {m}")) for m in MESSAGES}

    async def close(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)


async def chat_saying(env: dict[str, str], lines: tuple[str, ...]) -> tuple[asyncio.subprocess.Process, Transcript]:
    """`memgate chat` started with `lines` typed at once, and the transcript of what it answers."""
    proc = await start(env, "chat", "--user", "alice")
    out = Transcript(proc)
    assert proc.stdin is not None
    proc.stdin.write("".join(m + "\n" for m in lines).encode())
    await proc.stdin.drain()
    return proc, out


async def console_kill(tmp: Path, when: str) -> Counts:
    name = f"console: SIGKILL {when} a reply"
    async with FakeLLM() as llm:
        def first_run(req: dict):
            # "after": the first reply goes out, the others hang; "during": every reply hangs.
            if is_reply_request(req) and (when == "during" or MESSAGES[0] not in req["messages"][-1]["content"]):
                return Delay(HANG, brain.respond(req))
            return brain.respond(req)

        llm.responder = first_run
        env = memgate_env(tmp, llm.base_url)
        proc, out = await chat_saying(env, MESSAGES)
        try:
            if when == "during":
                await until(lambda: any(is_reply_request(r) for r in llm.requests), "a reply being generated", proc=proc)
            else:
                await until(lambda: out.answers()[MESSAGES[0]] == 1 and
                            sum(1 for r in llm.requests if is_reply_request(r)) >= 2, "the first reply printed", proc=proc)
        finally:
            await kill(proc)
            await out.close()
        first = out.answers()
        llm.responder = brain.respond
        proc = await start(env, "chat", "--user", "alice")
        out = Transcript(proc)
        try:
            await settle(lambda: all(n + first[m] >= 1 for m, n in out.answers().items()), proc=proc)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # Ctrl-D: a clean exit
            await terminate(proc)
            await out.close()
        answers = {m: first[m] + n for m, n in out.answers().items()}
        return tally(name, list(MESSAGES), answers, stored_user_texts(tmp / "data"))


@scenario("console: SIGKILL during a reply")
async def console_kill_during(tmp: Path) -> Counts:
    return await console_kill(tmp, "during")


@scenario("console: SIGKILL after a reply")
async def console_kill_after(tmp: Path) -> Counts:
    return await console_kill(tmp, "after")


def memory_rows(data_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(chunks per user message text, ingest queue rows per status) of a stopped bot's database."""
    store = Store(data_dir / "memgate.duckdb", 384)
    try:
        chunks = dict(store.read(lambda c: c.execute(
            "SELECT text, count(*) FROM memories WHERE kind = 'chunk' AND status = 'active' GROUP BY text").fetchall()))
        queue = dict(store.read(lambda c: c.execute("SELECT status, count(*) FROM ingest_queue GROUP BY status").fetchall()))
    finally:
        store.close()
    return chunks, queue


async def quiet(llm: FakeLLM, since: int, seconds: float = 3.0, timeout: float = 180.0) -> None:
    """Wait until the LLM has had requests since `since` and none for `seconds` (ingest is done)."""
    loop = asyncio.get_running_loop()
    deadline, last, stamp = loop.time() + timeout, -1, loop.time()
    while loop.time() < deadline:
        n = len(llm.requests)
        if n != last:
            last, stamp = n, loop.time()
        elif n > since and loop.time() - stamp >= seconds:
            return
        await asyncio.sleep(0.1)


@scenario("console: SIGKILL during ingest")
async def console_kill_during_ingest(tmp: Path) -> Counts:
    """Every reply went out; the memory model's calls hang when the process dies. After the
    restart each turn is ingested once: no turn lost, none stored twice, none answered again."""
    name = "console: SIGKILL during ingest"
    async with FakeLLM() as llm:
        llm.responder = lambda req: brain.respond(req) if is_reply_request(req) else Delay(HANG, brain.respond(req))
        env = memgate_env(tmp, llm.base_url)
        proc, out = await chat_saying(env, MESSAGES)
        try:
            await until(lambda: all(n == 1 for n in out.answers().values())
                        and any(not is_reply_request(r) for r in llm.requests), "every reply out, ingest in flight", proc=proc)
            # A reply printed is recorded as sent a moment later; a kill inside that moment is the
            # send -> record window ("SIGKILL after a reply" probes it). This scenario is about
            # ingest, whose calls hang for an hour: let the last record land first.
            await asyncio.sleep(2.0)
        finally:
            await kill(proc)
            await out.close()
        first = out.answers()
        seen = len(llm.requests)
        llm.responder = brain.respond
        proc = await start(env, "chat", "--user", "alice")
        out = Transcript(proc)
        try:
            await quiet(llm, seen)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            await terminate(proc)
            await out.close()
    answers = {m: first[m] + n for m, n in out.answers().items()}
    chunks, queue = memory_rows(tmp / "data")
    counts = tally(name, list(MESSAGES), answers, [m for m in MESSAGES if chunks.get(m, 0) >= 1],
                   note=f"chunks per message {[chunks.get(m, 0) for m in MESSAGES]}; queue {queue}")
    # A turn ingested twice would store its chunk twice: counted as answered twice (the turn repeated).
    return dataclasses.replace(counts, answered_twice=counts.answered_twice + sum(1 for m in MESSAGES if chunks.get(m, 0) > 1))


async def test_console_sigkill_during_ingest_ingests_each_turn_once(tmp_path: Path) -> None:
    counts = await console_kill_during_ingest(tmp_path)
    assert_safe(counts)
    assert counts.stored == 3 and "'pending'" not in counts.note and "'running'" not in counts.note, counts


@pytest.mark.parametrize("run", [console_kill_during, console_kill_after])
async def test_console_sigkill_loses_nothing_read(tmp_path: Path, run) -> None:
    counts = await run(tmp_path)
    assert counts.messages_in == 3
    assert_safe(counts)
