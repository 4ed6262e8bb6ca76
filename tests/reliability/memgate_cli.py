"""Driving the real `memgate` command in a subprocess for crash scenarios, and seeding or
reading its DuckDB file around it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from memory.store.connection import Store
from memory.store.rows import NewMemory, ensure_space, insert_memories

ROOT = str(Path(__file__).resolve().parents[2])


def cli_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a `memgate` subprocess using `tmp/data` and no config file."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "none.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
    env.update({"MEMGATE_DATA_DIR": str(tmp / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp / "none.toml")})
    env.update(extra)
    return env


async def run_cli(env: dict[str, str], *args: str, stdin: bytes | None = None, timeout: float = 600) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, env=env, cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


async def kill_when(proc: asyncio.subprocess.Process, ready, timeout: float = 300) -> None:
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


def count_by_space(db: Path) -> dict[str, int]:
    store = Store(db, 384)
    try:
        return dict(store.read(lambda c: c.execute("SELECT space_id, count(*) FROM memories GROUP BY ALL").fetchall()))
    finally:
        store.close()


def console_space(db: Path, name: str) -> str | None:
    store = Store(db, 384)
    try:
        row = store.read(lambda c: c.execute(
            "SELECT space_id FROM identities WHERE channel = 'console' AND external_id = ?", [name]).fetchone())
        return row[0] if row else None
    finally:
        store.close()
