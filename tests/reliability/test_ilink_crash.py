"""WeChat iLink: SIGKILL of `memgate run` before and during the reply, against the fake iLink
server. A message whose cursor the bot saved (and sent back: the server counts it as
acknowledged) must be answered once and stored after the restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.ilink import FakeIlink
from tests.fakes.llm_server import FakeLLM
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import (is_reply_request, kill, memgate_env, responder, settle, start, stored_user_texts,
                                     tally, terminate, until)

# Real processes started twice each, on a machine that may be busy: far above pytest's default.
pytestmark = pytest.mark.timeout(600)

MESSAGES = {"ana@im.wechat": "I moved to Chengdu for a job at a robotics lab.",
            "bo@im.wechat": "My daughter starts primary school in September.",
            "cy@im.wechat": "I only drink oolong tea, never coffee."}


def _answers(fake: FakeIlink) -> dict[str, int]:
    # The brain's reply echoes the message: "... You said: <message>".
    return {text: sum(1 for t in fake.texts_to(user) if t.endswith(f"You said: {text}")) for user, text in MESSAGES.items()}


async def ilink_kill(tmp: Path, when: str) -> Counts:
    name = f"wechat ilink: SIGKILL {when} the reply"
    async with FakeLLM() as llm, FakeIlink() as fake:
        fake.write_credentials(tmp / "data")
        env = memgate_env(tmp, llm.base_url, f'[channels.wechat]\nenabled = true\nbase_url = "{fake.base_url}"\n')
        llm.responder = responder(slow_replies=True)
        proc = await start(env, "run")
        try:
            for user, text in MESSAGES.items():
                fake.inject_text(user, text)
            if when == "before":
                # The cursor came back to the server: these messages will not be handed out again.
                await until(lambda: not fake.unacknowledged(), "the cursor acknowledged", proc=proc)
            else:
                await until(lambda: sum(1 for r in llm.requests if is_reply_request(r)) >= len(MESSAGES),
                            "every reply being generated", proc=proc)
                await until(lambda: not fake.unacknowledged(), "the cursor acknowledged", proc=proc)
        finally:
            await kill(proc)
        llm.responder = responder(slow_replies=False)
        proc = await start(env, "run")
        try:
            await settle(lambda: all(_answers(fake).values()), proc=proc)
        finally:
            await terminate(proc)
        return tally(name, list(MESSAGES.values()), _answers(fake), stored_user_texts(tmp / "data"))


@scenario("wechat ilink: SIGKILL before the reply")
async def ilink_kill_before(tmp: Path) -> Counts:
    return await ilink_kill(tmp, "before")


@scenario("wechat ilink: SIGKILL during the reply")
async def ilink_kill_during(tmp: Path) -> Counts:
    return await ilink_kill(tmp, "during")


@pytest.mark.parametrize("run", [ilink_kill_before, ilink_kill_during])
async def test_ilink_sigkill_loses_nothing_acknowledged(tmp_path: Path, run) -> None:
    counts = await run(tmp_path)
    assert counts.messages_in == 3
    assert_safe(counts)
