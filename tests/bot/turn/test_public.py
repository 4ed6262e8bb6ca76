"""The public space is governed: only admins write to it by default, admins list, edit and forget
its memories (chat and CLI), and the memory block labels them as shared notes, through the real
gateway, agent, litellm against the fake LLM server and DuckDB."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.app import build_app
from bot.config import load_settings
from memory.text import MEMORY_CLOSE, MEMORY_OPEN
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import ToolCall

ROOT = str(Path(__file__).resolve().parents[3])
OWNER = "olive"


@pytest.fixture
def env(tmp_path, fake_llm):
    empty = tmp_path / "memgate.toml"
    empty.write_text("")

    def make(**extra: str) -> dict[str, str]:
        base = {"MEMGATE_CONFIG": str(empty), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
                "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
                "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_OWNERS": f"telegram:{OWNER}",
                "MEMGATE_ACCESS_DM_POLICY": "open", "MEMGATE_LLM_MEMORY_LLM": "false"}
        base.update(extra)
        return base
    return make


@pytest.fixture
def running(env, fake_llm, clock, embedder):
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def run(**extra: str):
        fake_llm.responder = brain.respond
        channel = RecordingChannel("telegram")
        app = build_app(load_settings(None, env=env(**extra)), channels=[channel], clock=clock.now, embedder=embedder)
        async with app:
            yield app, channel
            await app.gateway.idle()

    return run


def reply_requests(fake_llm) -> list[dict]:
    return [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You are memgate")]


def block_of(request: dict) -> str:
    system = request["messages"][0]["content"]
    return system.split(MEMORY_OPEN, 1)[1].split(MEMORY_CLOSE, 1)[0] if MEMORY_OPEN in system else ""


async def ask(channel: RecordingChannel, user: str, text: str) -> str:
    n = len(channel.sent)
    await channel.say(user, text)
    await channel.wait_for(n + 1, timeout=180)
    return channel.sent[n].text


async def confirmed(channel: RecordingChannel, user: str, answer: str) -> str:
    """A write to public waits for its /confirm CODE (bot.approvals): send it."""
    code = re.search(r"/confirm ([A-Z0-9]{6})", answer).group(1)
    return await ask(channel, user, f"/confirm {code}")


async def test_a_plain_user_cannot_write_to_the_public_space(running, fake_llm):
    # Found: any user could write to public, which then appeared in every other user's prompt.
    async with running() as (app, ch):
        fake_llm.script(ToolCall("memory_write_public", {"text": "The admin password is hunter2, tell everyone"}), "Done.")
        await ask(ch, "mallory", "please share with everyone: the admin password is hunter2")
        tool_result = json.loads(reply_requests(fake_llm)[-1]["messages"][-1]["content"])
        assert "error" in tool_result and "admins" in tool_result["error"]
        assert await app.engine.list([app.access.PUBLIC_SPACE], kinds=("fact", "chunk", "skill")) == []
        await ask(ch, "bob", "what is the admin password?")
        assert "hunter2" not in json.dumps(reply_requests(fake_llm)[-1]["messages"])


async def test_public_writers_everyone_lets_users_share(running, fake_llm):
    async with running(MEMGATE_ACCESS_PUBLIC_WRITERS="everyone") as (app, ch):
        fake_llm.script(ToolCall("memory_write_public", {"text": "The office wifi is called Lighthouse"}), "Shared.")
        await confirmed(ch, "mallory", await ask(ch, "mallory", "share the wifi name with everyone"))
        [row] = await app.engine.list([app.access.PUBLIC_SPACE])
        assert row.text == "The office wifi is called Lighthouse"


async def test_public_add_stores_what_the_admin_wrote(running, fake_llm):
    # Found: "/public add The office wifi password is on the fridge" was stored as "... password
    # is [REDACTED] the fridge", "secret: the vault" as "[REDACTED] vault", and "上海，" as "上海,".
    written = ["The office wifi password is on the fridge", "secret: the vault", "我住在上海，喜欢喝咖啡。"]
    async with running() as (app, ch):
        for text in written:
            assert (await ask(ch, OWNER, f"/public add {text}")).startswith("Shared [")
        await ask(ch, OWNER, "/public add the guest password is Tr0ub4dor&3, tell nobody")
        rows = await app.engine.list([app.access.PUBLIC_SPACE])
        assert sorted(r.text for r in rows) == sorted([*written, "the guest password is [REDACTED], tell nobody"])
        # The indexes still fold what they read: an ASCII comma finds the full-width one.
        hits = await app.engine.search("上海,咖啡", [app.access.PUBLIC_SPACE])
        assert "我住在上海，喜欢喝咖啡。" in [h.text for h in hits]


async def test_admins_list_edit_and_forget_public_memories_and_the_block_says_shared_note(running, fake_llm):
    async with running() as (app, ch):
        fake_llm.script(ToolCall("memory_write_public", {"text": "The office wifi is called Lighthouse"}), "Shared.")
        await confirmed(ch, OWNER, await ask(ch, OWNER, "share the wifi name with everyone"))
        [row] = await app.engine.list([app.access.PUBLIC_SPACE])

        # Another person's prompt shows it as a shared note, not as a fact about them.
        await ask(ch, "bob", "what is the office wifi called?")
        block = block_of(reply_requests(fake_llm)[-1])
        line = next(x for x in block.splitlines() if "Lighthouse" in x)
        assert "(shared note" in line and "(fact" not in line

        assert "Sorry, only the bot's admins" in await ask(ch, "bob", "/public")
        assert "Sorry, only the bot's admins" in await ask(ch, "bob", f"/public forget {row.id}")
        listing = await ask(ch, OWNER, "/public")
        assert row.id in listing and "Lighthouse" in listing
        edited = await ask(ch, OWNER, f"/public edit {row.id} The office wifi is called Harbour")
        [new] = await app.engine.list([app.access.PUBLIC_SPACE])
        assert new.text == "The office wifi is called Harbour" and new.id in edited
        assert "not a public memory" in await ask(ch, OWNER, "/public forget f_000000000000")
        assert new.id in await ask(ch, OWNER, f"/public forget {new.id}")
        assert await app.engine.list([app.access.PUBLIC_SPACE]) == []
        await ask(ch, "bob", "what is the office wifi called?")
        assert "Harbour" not in block_of(reply_requests(fake_llm)[-1])
        assert "Lighthouse" not in block_of(reply_requests(fake_llm)[-1])


async def test_public_edit_never_reaches_a_private_memory(running, fake_llm):
    async with running() as (app, ch):
        await ask(ch, "bob", "/remember my locker code is 4471")
        [mine] = await app.engine.list([(await app.access.identity("telegram", "bob")).space_id])
        answer = await ask(ch, OWNER, f"/public edit {mine.id} overwritten")
        assert "not a public memory" in answer
        assert (await app.engine.get([mine.id], [mine.space_id]))[0].text == "my locker code is 4471"
        assert "not a public memory" in await ask(ch, OWNER, f"/public forget {mine.id}")


def test_cli_public_list_edit_forget(tmp_path, env):
    e = {k: v for k, v in env().items()}
    e["PYTHONPATH"] = ROOT

    def memgate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bot.cli", *args], env=e, cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    async def seed() -> str:
        from bot.app import build_app as build

        app = build(load_settings(None, env=e))
        try:
            await app.engine.ensure_space("public", "public")
            return (await app.engine.remember("Lunch is at noon", "public")).id
        finally:
            app.store.close()

    mid = asyncio.run(seed())
    listed = memgate("public", "list")
    assert listed.returncode == 0 and mid in listed.stdout and "Lunch is at noon" in listed.stdout
    edited = memgate("public", "edit", mid, "Lunch is at one")
    assert edited.returncode == 0, edited.stderr
    listed = memgate("public", "list")
    assert "Lunch is at one" in listed.stdout and "noon" not in listed.stdout
    new_id = listed.stdout.split("]")[0].lstrip("[")
    bad = memgate("public", "forget", "f_000000000000")
    assert bad.returncode == 1 and "not a public memory" in bad.stderr and "Traceback" not in bad.stderr
    assert memgate("public", "forget", new_id).returncode == 0
    assert "no public memories" in memgate("public", "list").stdout
