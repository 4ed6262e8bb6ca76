"""A full disk: the DuckDB file lives on a small tmpfs that is filled up (the WAL cannot grow)
while 40 Telegram messages arrive. No turn may be lost: a message the inbox cannot record is
left unconfirmed (Telegram hands it out again), a turn whose writes fail is held back and the
person told, and once the disk has room again every message is answered once and stored.

Needs root (mount -t tmpfs); the scenario reports itself skipped without it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.app import build_app
from bot.config import load_settings
from bot.turn.gateway import STORAGE_DOWN_TEXT
from tests.fakes import brain
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import settle, tally, until

pytestmark = pytest.mark.timeout(900)

USERS = (201, 202, 203, 204)
TURNS = 40


def _mount_tmpfs(path: Path, size: str = "96m") -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _fill(path: Path) -> Path:
    """Write a file until the file system says ENOSPC: nothing else fits after this."""
    filler = path / "filler.bin"
    block = b"\0" * (1 << 20)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            chunk = block[:size]
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def _answers(tg: FakeTelegram, sent: list[dict]) -> dict[str, int]:
    out = {}
    for msg in sent:
        out[msg["text"]] = sum(1 for s in tg.sent if s["chat_id"] == msg["chat"]["id"]
                               and (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"]
                               and s.get("visible_text") != STORAGE_DOWN_TEXT)
    return out


@scenario("full disk: 40 Telegram turns while the WAL cannot grow")
async def full_disk(tmp: Path) -> Counts:
    name = "full disk: 40 Telegram turns while the WAL cannot grow"
    disk = tmp / "disk"
    if not _mount_tmpfs(disk):
        return Counts(scenario=name, messages_in=0, answered=0, stored=0, lost=0, leaked=0,
                      note="skipped: cannot mount a tmpfs here (needs root)")
    try:
        async with FakeLLM(responder=brain.respond) as llm, FakeTelegram() as tg:
            (tmp / "none.toml").write_text("")
            env = {"MEMGATE_CONFIG": str(tmp / "none.toml"), "MEMGATE_DATA_DIR": str(disk / "data"),
                   "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
                   "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_DM_POLICY": "open",
                   "MEMGATE_DELIVERY_STORAGE_RETRY_SECONDS": "0.3", "MEMGATE_DELIVERY_RETRY_BASE_SECONDS": "0.2"}
            adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=1, retry_delay=0.05)
            app = build_app(load_settings(None, env=env), channels=[adapter])
            async with app:
                # Everyone has talked before: the full disk meets people the bot knows.
                hello = [tg.inject_message(u, f"hello from {u}", first_name=f"User{u}") for u in USERS]
                await until(lambda: all(_answers(tg, hello).values()), "the warm-up answered")
                await app.gateway.idle()
                await app.engine.worker.drain()
                filler = _fill(disk)
                sent = [tg.inject_message(USERS[i % len(USERS)], f"turn {i}: I water the plants on day {i}.",
                                          first_name=f"User{USERS[i % len(USERS)]}") for i in range(TURNS)]
                # The disk is really refusing: someone was told their message waits for storage.
                told = await settle(lambda: STORAGE_DOWN_TEXT in tg.sent_texts(), timeout=120)
                filler.unlink()
                await settle(lambda: all(_answers(tg, sent).values()), timeout=600)
                await app.gateway.idle()
                await app.engine.worker.drain()
                stored = [m for (payload,) in app.store.read(lambda c: c.execute("SELECT payload FROM ingest_queue").fetchall())
                          for m in [payload]]
                stored_texts = [msg["text"] for msg in sent if any(msg["text"] in p for p in stored)]
            notices = tg.sent_texts().count(STORAGE_DOWN_TEXT)
            return tally(name, [m["text"] for m in sent], _answers(tg, sent), stored_texts,
                         note=f"{notices} told to wait for storage" if told else "the disk never refused a write")
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


async def test_a_full_disk_costs_no_turn(tmp_path: Path) -> None:
    counts = await full_disk(tmp_path)
    if counts.note.startswith("skipped"):
        pytest.skip(counts.note)
    assert counts.messages_in == TURNS
    assert "told to wait" in counts.note  # the full disk really refused writes
    assert_safe(counts)
