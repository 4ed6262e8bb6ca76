"""SIGTERM while memory work is with the model (issue 30: the stop took 65-85 s and started a new
model call 34 s after the signal): the real `memgate chat` exits without another model call, the
turn stays in the durable queue untouched, and the next start ingests it."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from tests.fakes import brain
from tests.fakes.llm_server import After, FakeLLM
from tests.fakes.ports import free_port
from tests.reliability.procs import is_reply_request, kill, memgate_env, rows, start, stderr_tail, terminate, until
from tests.reliability.test_console_crash import Transcript

# Real processes started twice, on a machine that may be busy: far above pytest's default.
pytestmark = pytest.mark.timeout(600)

SAID = "My sister Ana lives in Lisbon and plays the cello."


async def test_sigterm_during_memory_work_exits_without_another_model_call_and_keeps_the_turn(tmp_path: Path) -> None:
    never = asyncio.Event()   # the model "writes" every memory answer for ever: slow memory work

    def slow_memory(req: dict):
        return brain.respond(req) if is_reply_request(req) else After(never.wait, brain.respond(req))

    async with FakeLLM(responder=slow_memory) as llm:
        # memgate's defaults for a server on this machine: one call at a time, memory calls retried.
        env = memgate_env(tmp_path, llm.base_url, MEMGATE_LLM_RETRIES="2", MEMGATE_LLM_CONCURRENCY="0")
        proc = await start(env, "chat", "--user", "alice")
        out = Transcript(proc)
        try:
            assert proc.stdin is not None
            proc.stdin.write(f"{SAID}\n".encode())   # stdin stays open: the person is still there
            await proc.stdin.drain()
            await until(lambda: any(SAID in r for r in out.replies), "the reply printed", proc=proc)
            await until(lambda: any(not is_reply_request(r) for r in llm.requests), "memory work with the model",
                        proc=proc)
            seen = len(llm.requests)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            # Prompt means: it exits by itself (the test's own timeout is the bound, not a clock here).
            code = await proc.wait()
        finally:
            await kill(proc)
            await out.close()
        assert code == 0
        assert len(llm.requests) == seen and all(t <= signalled for t in llm.request_times), \
            "a model call started after the signal"
    queued = rows(tmp_path / "data", "SELECT status, attempts, last_error FROM ingest_queue")
    assert queued == [("pending", 0, None)]          # untouched: no attempt counted, nothing stored raw

    # The next start (a service, serving its API: the database stays its own while it runs).
    async with FakeLLM(responder=brain.respond) as llm, aiohttp.ClientSession() as http:
        port = free_port()
        proc = await start(memgate_env(tmp_path, llm.base_url, MEMGATE_API_PORT=str(port)), "run")
        try:
            await until_healthy(http, f"http://127.0.0.1:{port}/healthz", proc)
        finally:
            await terminate(proc)
    assert rows(tmp_path / "data", "SELECT status FROM ingest_queue") == [("done",)]
    facts = rows(tmp_path / "data", "SELECT text FROM memories WHERE kind = 'fact'")
    assert any("Lisbon" in text for (text,) in facts)


async def until_healthy(http: aiohttp.ClientSession, url: str, proc: asyncio.subprocess.Process) -> None:
    """Until /healthz says the ingest queue is empty (polled; the process must stay up)."""
    while True:
        if proc.returncode is not None:
            raise AssertionError(f"memgate exited ({proc.returncode}):\n{await stderr_tail(proc)}")
        try:
            async with http.get(url) as resp:
                if resp.status == 200 and (await resp.json()).get("ingest_queue") == 0:
                    return
        except aiohttp.ClientError:
            pass   # not listening yet
        await asyncio.sleep(0.2)
