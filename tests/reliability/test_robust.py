"""Reliability scenarios for schema changes, import, huge inputs and bad configuration.

Each scenario drives the real `memgate` command in a subprocess (real DuckDB file, real litellm
against the fake OpenAI-compatible server) and SIGKILLs it where a crash used to do harm.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from memory.store.connection import Store
from memory.store.rows import NewMemory, ensure_space, insert_memories
from tests.fakes.llm_server import FakeLLM
from tests.reliability.harness import Counts, assert_safe, scenario

ROOT = str(Path(__file__).resolve().parents[2])


def cli_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a `memgate` subprocess using `tmp/data` and no config file."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "none.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
    env.update({"MEMGATE_DATA_DIR": str(tmp / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp / "none.toml")})
    env.update(extra)
    return env


async def run_cli(env: dict[str, str], *args: str, stdin: bytes | None = None, timeout: float = 120) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, env=env, cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


async def kill_when(proc: asyncio.subprocess.Process, ready, timeout: float = 60) -> None:
    """SIGKILL `proc` as soon as `ready()` holds (polled; never a fixed sleep as the trigger)."""
    for _ in range(int(timeout / 0.02)):
        if ready() or proc.returncode is not None:
            break
        await asyncio.sleep(0.02)
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
    await proc.wait()


def seed_memories(db: Path, n: int, space: str = "u_alice") -> dict[str, str]:
    """n facts with 384-d vectors in a fresh database; returns id -> text."""
    store = Store(db, 384)
    try:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        rows = [NewMemory(space_id=space, kind="fact", text=f"memory number {i}: I like colour {i % 17}",
                          title=f"memory {i}", created_at=now + timedelta(seconds=i)) for i in range(n)]
        rng = np.random.default_rng(0)
        vecs = rng.normal(size=(n, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)

        def write(con):
            ensure_space(con, space, "user", "alice", now)
            return insert_memories(con, rows, vecs)

        ids = store.write(write)
        return dict(zip(ids, (r.text for r in rows)))
    finally:
        store.close()


def read_memories(db: Path) -> tuple[dict[str, str], int, set[int]]:
    """(id -> text, stored embedding dimension, lengths of the stored vectors) of a database."""
    store = Store(db, 384)
    try:
        rows = dict(store.read(lambda c: c.execute("SELECT id, text FROM memories").fetchall()))
        lens = {r[0] for r in store.read(lambda c: c.execute(
            "SELECT DISTINCT coalesce(len(embedding), 0) FROM memories").fetchall())}
        return rows, store.dim, lens
    finally:
        store.close()


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
