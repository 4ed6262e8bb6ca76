"""Reliability scenarios for schema changes, import, huge inputs and bad configuration.

Each scenario drives the real `memgate` command in a subprocess (real DuckDB file, real litellm
against the fake OpenAI-compatible server) and SIGKILLs it where a crash used to do harm.
"""

from __future__ import annotations

import asyncio
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


async def test_import_killed_midway_then_rerun_gives_one_clean_import(tmp_path):
    counts = await import_killed_midway(tmp_path)
    assert_safe(counts)
    assert counts.stored == 300
    after_kill = int(counts.note.split(" rows in")[0])
    assert 0 < after_kill < 300  # the kill really landed mid-import
