"""README command 1 with no model server listening (issue 15): the reply names the address that
failed and that the message was kept; the log and `memgate doctor` say what to run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.app import build_app
from bot.config import load_settings
from bot.model_servers import down_hint, shown_address
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import After, Delay, FakeError
from tests.fakes.ports import free_port

ROOT = str(Path(__file__).resolve().parents[2])
KEY = "sk-very-secret-key-123"


def _env(tmp_path: Path, base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))}
    (tmp_path / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp_path / "none.toml"),
                "MEMGATE_LLM_API_BASE": base, "MEMGATE_LLM_MODEL": "qwen2.5", "MEMGATE_LLM_RETRIES": "0",
                "MEMGATE_LLM_API_KEY": KEY})
    return env


def test_chat_with_no_model_server_names_the_address_and_keeps_the_message(tmp_path):
    base = f"http://127.0.0.1:{free_port()}/v1"
    out = subprocess.run([sys.executable, "-m", "bot.cli", "chat", "--user", "ann"], input="my cat is called Miso\n",
                         env=_env(tmp_path, base), cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    reply = next(line for line in out.stdout.splitlines() if line.startswith("memgate: "))
    assert base in reply and "kept" in reply
    assert KEY not in out.stdout + out.stderr
    log = (tmp_path / "data" / "memgate.log").read_text()
    failed = [line for line in log.splitlines() if "LLM failed" in line]
    assert failed and base in failed[0] and "ollama serve" in failed[0] and "ollama pull qwen2.5" in failed[0]
    assert "memgate doctor" in failed[0] and KEY not in log


def test_doctor_says_what_to_run_for_a_local_server(tmp_path):
    base = f"http://127.0.0.1:{free_port()}/v1"
    out = subprocess.run([sys.executable, "-m", "bot.cli", "doctor"], env=_env(tmp_path, base), cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 1
    assert base in out.stdout and "ollama serve" in out.stdout and "ollama pull qwen2.5" in out.stdout
    assert "[ok] voice notes wait for a speech endpoint ([speech] model)" in out.stdout
    assert KEY not in out.stdout + out.stderr and "Traceback" not in out.stderr


def test_a_remote_provider_hint_names_the_key_variable_not_ollama():
    hint = down_hint("", "openai/gpt-4o-mini")
    assert "MEMGATE_LLM_API_KEY" in hint and "ollama" not in hint


@given(user=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
       password=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=4, max_size=30),
       token=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=30))
def test_the_shown_address_never_carries_credentials(user, password, token):
    url = f"https://{user}:{password}@llm.example:8443/v1?api_key={token}"
    shown = shown_address(url, "m")
    assert shown == "https://llm.example:8443/v1"


# --- issue 27: a configuration error told from an outage, and an outage told at once ----------

async def test_a_model_name_litellm_cannot_route_is_refused_at_start_naming_the_key(tmp_path):
    # Found: MEMGATE_LLM_MODEL=qwen2.5 with no address was "not answering right now" after ~25 s.
    env = _env(tmp_path, "")
    del env["MEMGATE_LLM_API_BASE"]

    async def memgate(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", *args, env=env, cwd=ROOT,
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(b"hello\n"), 120)
        return proc.returncode, out.decode() + err.decode()

    for code, out in await asyncio.gather(memgate("chat"), memgate("run"), memgate("doctor")):
        lines = [line for line in out.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, out
        assert "'llm.model' (MEMGATE_LLM_MODEL) = 'qwen2.5'" in lines[0] and "ollama/qwen2.5" in lines[0], out
    assert not (tmp_path / "data" / "memgate.duckdb").exists()  # refused before anything was opened


@pytest.fixture
def bot_at(tmp_path, clock, embedder):
    """A running app (real gateway, agent, litellm, DuckDB) whose model is at `base`."""

    @asynccontextmanager
    async def run(base: str, **extra: str):
        env = {**_env(tmp_path, base), "MEMGATE_ACCESS_OWNERS": "telegram:olive", "MEMGATE_ACCESS_DM_POLICY": "open",
               "MEMGATE_LLM_MEMORY_LLM": "false", "MEMGATE_LLM_RETRIES": "2", **extra}
        channel = RecordingChannel("telegram")
        async with build_app(load_settings(None, env=env), channels=[channel], clock=clock.now, embedder=embedder) as app:
            await app.warmed_up()  # the turns' times are the turns' own, not litellm's import
            yield app, channel
            await app.gateway.idle()

    return run


async def _ask(channel: RecordingChannel, user: str, text: str) -> tuple[str, float]:
    n, t0 = len(channel.sent), time.monotonic()
    await channel.say(user, text)
    await channel.wait_for(n + 1, timeout=120)
    return channel.sent[n].text, time.monotonic() - t0


async def test_a_refused_address_is_told_at_once_with_the_address_and_what_to_run(bot_at):
    # Found: ~24 s of retries, then "not answering", the hint only in the log.
    base = f"http://127.0.0.1:{free_port()}/v1"
    async with bot_at(base) as (app, ch):
        reply, took = await _ask(ch, "olive", "hello?")          # the owner: can start the server
        assert base in reply and "connection refused" in reply and "kept" in reply
        assert "ollama serve" in reply and "ollama pull qwen2.5" in reply
        assert app.llm.usage.failures == {"reply": 1}       # one attempt: not retried twice
        assert took < 10, took
        reply, _ = await _ask(ch, "bob", "hello?")                # anyone else: told, not given commands
        assert base in reply and "connection refused" in reply and "ollama" not in reply


async def test_a_silent_server_is_told_after_the_first_token_timeout(bot_at, fake_llm):
    # Found: a server that accepts and never answers gave a 120 s spinner, then no address.
    never = asyncio.Event()
    fake_llm.responder = lambda body: After(never.wait, "too late")
    async with bot_at(fake_llm.base_url, MEMGATE_LLM_FIRST_TOKEN_TIMEOUT="1") as (app, ch):
        reply, took = await _ask(ch, "olive", "are you there?")
        assert fake_llm.base_url in reply and "sent nothing for 1 s" in reply and "ollama serve" in reply
        assert len(fake_llm.requests) == 1 and took < 10, (fake_llm.requests, took)


async def test_a_model_the_server_does_not_have_is_told_with_the_pull_command(bot_at, fake_llm):
    fake_llm.responder = lambda body: FakeError(404, "model 'qwen2.5' not found, try pulling it first")
    async with bot_at(fake_llm.base_url) as (app, ch):
        reply, _ = await _ask(ch, "olive", "hi")
        assert fake_llm.base_url in reply and "no model by the configured name" in reply
        assert "ollama pull qwen2.5" in reply and len(fake_llm.requests) == 1


async def test_a_slow_first_token_within_the_timeout_is_waited_for_and_streamed(bot_at, fake_llm):
    fake_llm.responder = lambda body: Delay(1.5, "Here is the slow answer.") if body.get("stream") else "not streamed"
    async with bot_at(fake_llm.base_url, MEMGATE_LLM_FIRST_TOKEN_TIMEOUT="4") as (app, ch):
        reply, took = await _ask(ch, "olive", "take your time")
        assert reply == "Here is the slow answer." and took >= 1.5
        assert app.llm.usage.failures == {} and app.llm.usage.completion_tokens["reply"] > 0


async def test_doctor_waits_for_a_silent_model_only_its_budget(tmp_path, fake_llm, monkeypatch):
    # Found: `memgate doctor` took 206 s on a server that accepts and never answers (60 s x 3 tries).
    from bot.cli import doctor_llm as doctor
    from memory.errors import ModelSilent

    never = asyncio.Event()
    fake_llm.responder = lambda body: After(never.wait, "too late")
    monkeypatch.setattr(doctor, "MODEL_WAIT", 1.0)
    settings = load_settings(None, env={**_env(tmp_path, fake_llm.base_url), "MEMGATE_LLM_RETRIES": "2"})
    check = doctor.start_model_check(settings)
    await asyncio.to_thread(check.join, 120)
    assert isinstance(check.failure, ModelSilent) and check.failure.seconds == 1.0
    # One try that reached the server (litellm's set-up is not counted in the budget), given up on
    # after its budget: not 60 s x 3.
    assert len(fake_llm.requests) == 1 and time.monotonic() - fake_llm.request_times[0] < 5
