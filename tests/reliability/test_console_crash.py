"""The console: SIGKILL of `memgate chat` while a reply is being generated (and right after one
was printed); every line it had read must be answered once and stored after the restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

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
        proc = await start(env, "chat", "--user", "alice")
        out = Transcript(proc)
        assert proc.stdin is not None
        try:
            proc.stdin.write("".join(m + "\n" for m in MESSAGES).encode())
            await proc.stdin.drain()
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


@pytest.mark.parametrize("run", [console_kill_during, console_kill_after])
async def test_console_sigkill_loses_nothing_read(tmp_path: Path, run) -> None:
    counts = await run(tmp_path)
    assert counts.messages_in == 3
    assert_safe(counts)
