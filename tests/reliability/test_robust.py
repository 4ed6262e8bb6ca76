"""Reliability scenarios for schema changes, import, huge inputs and bad configuration.

Each scenario drives the real `memgate` command in a subprocess (real DuckDB file, real litellm
against the fake OpenAI-compatible server) and SIGKILLs it where a crash used to do harm.
"""

from __future__ import annotations

import pytest
import asyncio
import json
import sys
from pathlib import Path

from memory.store.connection import Store
from tests.fakes.llm_server import FakeLLM
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.memgate_cli import (
    ROOT, cli_env, console_space, count_by_space, kill_when, read_memories, run_cli, seed_memories,
)


# --- reembed -------------------------------------------------------------------------------
@scenario("reembed to a new dimension: SIGKILL midway, then again")
async def reembed_killed_midway(tmp: Path) -> Counts:
    n = 640
    db = tmp / "data" / "memgate.duckdb"
    before = seed_memories(db, n)
    async with FakeLLM(embed_dim=64) as server:
        server.embed_delay = 0.2
        env = cli_env(tmp, MEMGATE_EMBEDDING_PROVIDER="litellm", MEMGATE_EMBEDDING_MODEL="openai/fake-embed",
                      MEMGATE_EMBEDDING_API_BASE=server.base_url, MEMGATE_EMBEDDING_DIM="64")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "reembed", env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        # Two batches are done and the third is being embedded when the kill lands.
        await kill_when(proc, lambda: len(server.embedding_requests) >= 3)
        killed_after = len(server.embedding_requests)
        try:
            after_kill, _, _ = read_memories(db)
        except Exception as exc:  # the bug: the file no longer opens
            return Counts("reembed to a new dimension: SIGKILL midway, then again", n, 0, 0, n, 0,
                          note=f"database unusable after the kill: {str(exc)[:120]}")
        server.embedding_requests.clear()
        server.embed_delay = 0.0
        code, out, err = await run_cli(env, "reembed")
        rerun_inputs = sum(len(r["input"]) for r in server.embedding_requests)
    after, dim, lens = read_memories(db)
    lost = len(set(before.items()) - set(after.items())) + len(set(before.items()) - set(after_kill.items()))
    ok = code == 0 and dim == 64 and lens == {64}
    return Counts("reembed to a new dimension: SIGKILL midway, then again", n, 0, len(after), lost + (0 if ok else n), 0,
                  note=f"killed after {killed_after} batches; re-run embedded {rerun_inputs} of {n} (resumed); "
                       f"exit {code} dim {dim} {err.strip()[-200:] if code else ''}")


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_reembed_killed_midway_opens_with_every_memory_and_a_second_run_completes(tmp_path):
    counts = await reembed_killed_midway(tmp_path)
    assert_safe(counts)
    assert counts.stored == 640
    assert "re-run embedded" in counts.note
    rerun = int(counts.note.split("re-run embedded ")[1].split(" ")[0])
    assert rerun < 640  # the vectors built before the kill were kept


def test_reembed_to_same_dimension_keeps_every_row(tmp_path):
    from memory.embed import LocalE5Embedder
    from memory.engine import MemoryEngine

    db = tmp_path / "data" / "memgate.duckdb"
    before = seed_memories(db, 70)
    store = Store(db, 384)
    try:
        engine = MemoryEngine(store, LocalE5Embedder(), None)
        assert engine.reembed(LocalE5Embedder(), batch=32) == 70
        assert store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE embedding IS NULL").fetchone()[0]) == 0
    finally:
        store.close()
    after, dim, lens = read_memories(db)
    assert after == before and dim == 384 and lens == {384}


# --- import --------------------------------------------------------------------------------
@scenario("memory import: SIGKILL mid-import, then re-run twice")
async def import_killed_midway(tmp: Path) -> Counts:
    name = "memory import: SIGKILL mid-import, then re-run twice"
    n = 300
    src = tmp / "source"
    seed_memories(src / "data" / "memgate.duckdb", n, space="u_0123456789ab")
    export = tmp / "alice.jsonl"
    code, _, err = await run_cli(cli_env(src), "memory", "export", str(export), "--space", "u_0123456789ab")
    if code != 0:
        return Counts(name, n, 0, 0, n, 0, note=f"export failed: {err.strip()[-200:]}")
    dest = tmp / "dest"
    db = dest / "data" / "memgate.duckdb"
    async with FakeLLM(embed_dim=64) as server:
        server.embed_delay = 0.2
        env = cli_env(dest, MEMGATE_EMBEDDING_PROVIDER="litellm", MEMGATE_EMBEDDING_MODEL="openai/fake-embed",
                      MEMGATE_EMBEDDING_API_BASE=server.base_url, MEMGATE_EMBEDDING_DIM="64")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "memory", "import", str(export), "--user", "alice", env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await kill_when(proc, lambda: len(server.embedding_requests) >= 3)
        after_kill = sum(count_by_space(db).values())
        server.embed_delay = 0.0
        outs = [await run_cli(env, "memory", "import", str(export), "--user", "alice") for _ in range(2)]
    counts = count_by_space(db)
    alice = console_space(db, "alice")
    stored = counts.get(alice, 0)
    leaked = sum(v for k, v in counts.items() if k != alice)
    store = Store(db, 384)
    try:
        distinct = store.read(lambda c: c.execute("SELECT count(DISTINCT text) FROM memories").fetchone()[0])
    finally:
        store.close()
    ok = [code for code, _, _ in outs] == [0, 0] and "imported 0 memories" in outs[1][1]
    return Counts(name, n, 0, stored, max(0, n - stored) + (0 if ok else n), leaked,
                  answered_twice=sum(counts.values()) - distinct,
                  note=f"{after_kill} rows in before the kill; re-runs said {[o[1].strip() for o in outs]}")


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_import_killed_midway_then_rerun_gives_one_clean_import(tmp_path):
    counts = await import_killed_midway(tmp_path)
    assert_safe(counts)
    assert counts.stored == 300
    after_kill = int(counts.note.split(" rows in")[0])
    assert 0 < after_kill < 300  # the kill really landed mid-import


# --- huge inputs -----------------------------------------------------------------------------
@scenario("huge message (300k chars) and huge LLM reply while another person talks")
async def huge_inputs(tmp: Path) -> Counts:
    from bot.app import build_app
    from bot.config import load_settings
    from tests.fakes import brain
    from tests.fakes.channel import RecordingChannel

    name = "huge message (300k chars) and huge LLM reply while another person talks"
    huge = "My bees live on the roof and make heather honey. " * 6_000

    def respond(req):
        if req["messages"][0]["content"].startswith("You are memgate") and "heather honey" in req["messages"][-1]["content"]:
            return "Honey! " * 50_000  # 350k characters
        return brain.respond(req)

    async with FakeLLM(responder=respond) as server:
        settings = load_settings(None, env={
            "MEMGATE_DATA_DIR": str(tmp / "data"), "MEMGATE_LLM_API_BASE": server.base_url, "MEMGATE_LLM_CONCURRENCY": "64",
            "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
            "MEMGATE_MEMORY_EMBED_PIECE_CHARS": "300", "MEMGATE_MEMORY_EMBED_MAX_PIECES": "2"})
        channel = RecordingChannel("console")
        app = build_app(settings, channels=[channel])
        async with app:
            await channel.say("ann", huge)
            await channel.say("ben", "I am ben and I like chess.")
            await channel.wait_for(2, timeout=300)
            await app.gateway.idle()
            await app.engine.worker.drain()
            stored = dict(app.store.read(lambda c: c.execute(
                "SELECT speaker, count(*) FROM memories WHERE kind = 'chunk' AND role = 'user' GROUP BY ALL").fetchall()))
            users = dict(app.store.read(lambda c: c.execute(
                "SELECT text, space_id FROM memories WHERE kind = 'chunk' AND role = 'user'").fetchall()))
        longest = max(len(r.text) for r in channel.sent)
        ben_saw = [r.text for r in channel.sent if r.chat_id == "ben"]
        ben_prompts = [r for r in server.requests if "chess" in r["messages"][-1]["content"]]
    answered = len({r.chat_id for r in channel.sent})
    whole = sum(1 for t in users if len(t) > 200_000)
    leaked = sum("heather" in t for t in ben_saw) + sum("heather" in json.dumps(r, ensure_ascii=False) for r in ben_prompts)
    n_stored = sum(stored.values())
    return Counts(name, 2, answered, n_stored, 2 - min(answered, n_stored), leaked,
                  note=f"longest reply sent {longest} chars; huge message stored whole: {whole == 1}")


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_huge_inputs_are_answered_stored_and_bounded(tmp_path):
    counts = await huge_inputs(tmp_path)
    assert_safe(counts)
    assert counts.answered == 2 and counts.stored == 2
    assert "stored whole: True" in counts.note
    assert int(counts.note.split("longest reply sent ")[1].split()[0]) <= 20_000


# --- bad configuration -----------------------------------------------------------------------
BAD_CONFIGS = {
    "agent.max_tool_rounds = -1": "[agent]\nmax_tool_rounds = -1\n",
    "llm.retries = -1": "[llm]\nretries = -1\n",
    "memory.inject_items = -3": "[memory]\ninject_items = -3\n",
    "embedding.dim = -1": "[embedding]\nprovider = 'litellm'\nmodel = 'x'\ndim = -1\n",
    "log_level = LOUD": 'log_level = "LOUD"\n',
    "not UTF-8": b'[agent]\nname = "caf\xe9"\n',
    "a directory": None,
}


@scenario("bad configuration: one clear line and a non-zero exit, never a traceback")
async def bad_configs(tmp: Path) -> Counts:
    name = "bad configuration: one clear line and a non-zero exit, never a traceback"

    async def one(i: int, key: str, body) -> bool:
        cfg = tmp / f"c{i}.toml"
        if body is None:
            cfg.mkdir(parents=True)
        elif isinstance(body, bytes):
            cfg.write_bytes(body)
        else:
            cfg.write_text(body)
        code, _, err = await run_cli(cli_env(tmp, MEMGATE_CONFIG=str(cfg)), "jobs")
        lines = [line for line in err.splitlines() if line.strip()]
        return code != 0 and "Traceback" not in err and len(lines) == 1

    tmp.mkdir(parents=True, exist_ok=True)
    results = await asyncio.gather(*(one(i, k, b) for i, (k, b) in enumerate(BAD_CONFIGS.items())))
    bad = [k for k, ok in zip(BAD_CONFIGS, results) if not ok]
    return Counts(name, len(BAD_CONFIGS), sum(results), 0, len(bad), 0, note=f"unclear: {bad}" if bad else "")


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_bad_configs_each_get_one_clear_line(tmp_path):
    assert_safe(await bad_configs(tmp_path))
