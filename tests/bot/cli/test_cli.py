"""The command line as a person uses it: `memgate chat` in a subprocess (crash safety, memory
across restarts), no-LLM guidance, a locked database, config errors, export/import."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from bot.config import load_settings
from bot.errors import ConfigError
from memory.store.connection import Store
from tests.fakes import brain

ROOT = str(Path(__file__).resolve().parents[3])
# Each test starts `memgate chat` (litellm, the embedding model) up to three times; on a busy
# 2-core machine one start took 30 s. WAIT bounds a process that ends by itself (only a hang
# reaches it): the tests wait on the process, not on a clock.
WAIT = 300
pytestmark = pytest.mark.timeout(900)


def env_for(tmp_path, fake_llm=None, **extra) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp_path / "none.toml")})
    (tmp_path / "none.toml").write_text("")
    if fake_llm is not None:
        env.update({"MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0"})
    env.update(extra)
    return env


async def start_chat(env, user="alice"):
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--user", user, env=env, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def read_reply(proc, timeout=float(WAIT)) -> str:
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode()
        if not line:
            raise AssertionError("chat ended without a reply: " + (await proc.stderr.read()).decode()[-2000:])
        if line.startswith("memgate: "):
            return line[len("memgate: "):].strip()


async def test_killed_right_after_a_reply_the_turn_is_ingested_once_on_restart(tmp_path, fake_llm):
    from memory import prompts
    from tests.fakes.llm_server import Delay

    # First run: the memory LLM is slow, so the turn is certainly still queued when we kill.
    fake_llm.responder = lambda req: (Delay(30, brain.respond(req))
                                      if req["messages"][0]["content"].startswith(prompts.TURN_SYSTEM[:40])
                                      else brain.respond(req))
    env = env_for(tmp_path, fake_llm)
    proc = await start_chat(env)
    proc.stdin.write("My grandmother's name is Rosalind and she lives in Porto.\n".encode())
    await proc.stdin.drain()
    reply = await read_reply(proc)
    assert "Rosalind" in reply
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    store = Store(tmp_path / "data" / "memgate.duckdb", 384)
    try:
        assert store.read(lambda c: c.execute("SELECT status FROM ingest_queue").fetchall()) == [("pending",)]
        assert store.read(lambda c: c.execute("SELECT count(*) FROM memories").fetchone()[0]) == 0
    finally:
        store.close()

    fake_llm.responder = brain.respond
    proc = await start_chat(env)
    proc.stdin.write(b"/memory Rosalind\n")
    await proc.stdin.drain()
    await read_reply(proc)
    proc.stdin.close()
    assert (await asyncio.wait_for(proc.wait(), WAIT)) == 0
    store = Store(tmp_path / "data" / "memgate.duckdb", 384)
    try:
        rows = store.read(lambda c: c.execute(
            "SELECT count(*) FROM memories WHERE kind = 'chunk' AND text LIKE '%Rosalind%' AND role = 'user'").fetchone()[0])
        facts = store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE kind = 'fact'").fetchone()[0])
        queue = store.read(lambda c: c.execute("SELECT status, count(*) FROM ingest_queue GROUP BY status").fetchall())
    finally:
        store.close()
    assert rows == 1 and facts == 1
    assert queue == [("done", 1)]  # /memory is a command: answered, not captured


async def test_conversation_remembers_across_restarts(tmp_path, fake_llm):
    fake_llm.responder = brain.respond
    env = env_for(tmp_path, fake_llm)
    proc = await start_chat(env)
    proc.stdin.write("I am training for the Berlin marathon in September.\n".encode())
    await proc.stdin.drain()
    await read_reply(proc)
    proc.stdin.close()
    assert (await asyncio.wait_for(proc.wait(), WAIT)) == 0  # clean exit drains the ingest queue
    proc = await start_chat(env)
    proc.stdin.write(b"which marathon am I training for?\n")
    await proc.stdin.drain()
    await read_reply(proc)
    proc.stdin.close()
    await asyncio.wait_for(proc.wait(), WAIT)
    last_reply_request = [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You are")][-1]
    assert "Berlin marathon" in last_reply_request["messages"][0]["content"]


async def test_no_llm_configured_explains_and_exits_nonzero(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", env=env_for(tmp_path), cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode == 2
    text = err.decode()
    assert "MEMGATE_LLM_MODEL" in text and "MEMGATE_LLM_API_BASE" in text and len(text.strip().splitlines()) == 3


async def test_second_process_gets_a_clear_locked_message(tmp_path):
    env = env_for(tmp_path)
    (tmp_path / "data").mkdir()
    holder = Store(tmp_path / "data" / "memgate.duckdb", 384)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "memory", "list", env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    finally:
        holder.close()
    assert proc.returncode == 3
    assert "in use by another memgate process" in err.decode()
    assert "Traceback" not in err.decode()


def test_unknown_or_mistyped_key_is_an_error_naming_it(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[agent]\nmax_tool_rouns = 3\n")
    with pytest.raises(ConfigError, match="agent.max_tool_rouns"):
        load_settings(cfg, env={})
    cfg.write_text("[agent]\nmax_tool_rounds = 'many'\n")
    with pytest.raises(ConfigError, match="agent.max_tool_rounds"):
        load_settings(cfg, env={})
    cfg.write_text("[llm]\napi_key = 'sk-123'\n")
    with pytest.raises(ConfigError, match="environment"):
        load_settings(cfg, env={})


def test_example_config_documents_every_key():
    import tomllib

    from bot.settings import Settings

    data = tomllib.loads(open(os.path.join(ROOT, "config.example.toml"), encoding="utf-8").read())
    assert load_settings(os.path.join(ROOT, "config.example.toml"), env={}) == Settings().model_copy(update={"secrets": {}})

    def keys(model, prefix=""):
        for name, field in model.model_fields.items():
            if name == "secrets":
                continue
            sub = field.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                yield from keys(sub, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    def present(d, dotted):
        for part in dotted.split("."):
            if part not in d:
                return False
            d = d[part]
        return True

    missing = [k for k in keys(Settings) if not present(data, k)]
    assert missing == []


def test_env_overrides_and_secrets(tmp_path):
    s = load_settings(tmp_path / "missing-ok.toml" if False else None,
                      env={"MEMGATE_CONFIG": str(tmp_path / "x.toml"), "MEMGATE_LLM_API_BASE": "http://127.0.0.1:9/v1",
                           "MEMGATE_LLM_API_KEY": "sk-secret", "MEMGATE_ACCESS_OWNERS": "telegram:1,telegram:2"}) \
        if (tmp_path / "x.toml").write_text("") is not None else None
    assert s.llm.api_base == "http://127.0.0.1:9/v1" and s.secret("llm_api_key") == "sk-secret"
    assert s.access.owners == ("telegram:1", "telegram:2")
    assert "sk-secret" not in repr(s) and "sk-secret" not in s.model_dump_json()


async def test_export_then_import_round_trip(tmp_path, fake_llm):
    fake_llm.responder = brain.respond
    env = env_for(tmp_path, fake_llm)
    proc = await start_chat(env)
    proc.stdin.write(b"/remember I prefer window seats on planes\n")
    await proc.stdin.drain()
    await read_reply(proc)
    proc.stdin.close()
    await asyncio.wait_for(proc.wait(), WAIT)
    out = tmp_path / "export.jsonl"
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "memory", "export", str(out), env=env, cwd=ROOT,
                                             stderr=asyncio.subprocess.PIPE)
    await asyncio.wait_for(p.wait(), WAIT)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert any(r["text"] == "I prefer window seats on planes" and r["pinned"] for r in rows)
    env2 = env_for(tmp_path / "other")
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "memory", "import", str(out), "--user", "alice",
                                             env=env2, cwd=ROOT,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(p.communicate(), WAIT)
    assert f"imported {len(rows)} memories" in stdout.decode()


async def test_sigterm_shuts_down_cleanly_and_the_next_start_ingests_the_turn(tmp_path, fake_llm):
    # SIGTERM stops memory work at once (issue 30; tests/reliability/test_stop_during_memory.py
    # holds the model busy to prove it): the turn is kept, queued or done, never lost or raw.
    fake_llm.responder = brain.respond
    env = env_for(tmp_path, fake_llm)
    proc = await start_chat(env, user="gina")
    proc.stdin.write("I keep my passport in the blue drawer.\n".encode())
    await proc.stdin.drain()
    await read_reply(proc)
    proc.send_signal(signal.SIGTERM)
    assert (await asyncio.wait_for(proc.wait(), WAIT)) == 0
    store = Store(tmp_path / "data" / "memgate.duckdb", 384)
    try:
        queue = store.read(lambda c: c.execute("SELECT status FROM ingest_queue").fetchall())
    finally:
        store.close()
    assert queue in ([("pending",)], [("done",)])
    # A piped chat that ends is not a stop: it drains the queue before it returns.
    proc = await start_chat(env, user="gina")
    proc.stdin.close()
    assert (await asyncio.wait_for(proc.wait(), WAIT)) == 0
    store = Store(tmp_path / "data" / "memgate.duckdb", 384)
    try:
        queue = store.read(lambda c: c.execute("SELECT status FROM ingest_queue").fetchall())
        facts = store.read(lambda c: c.execute("SELECT text FROM memories WHERE kind = 'fact'").fetchall())
    finally:
        store.close()
    assert queue == [("done",)]
    assert facts == [("I keep my passport in the blue drawer.",)]
