"""The command line while `memgate run` is up (issue 11 section 4): real subprocesses, a fake
Telegram on loopback, the fake LLM. The CLI finds the gateway through api.json + api.token and acts
through its admin API; with a stale api.json left by a killed gateway it falls back to the file."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys

import aiohttp
import pytest

from tests.bot.test_cli import ROOT, env_for
from tests.fakes.telegram_api import FakeTelegram

PAIRING_CODE = re.compile(r"pairing code is ([A-Z0-9]+)")
CLI_TIMEOUT = 120
# Each test drives a gateway and a dozen CLI processes (a few seconds each on a loaded machine):
# pytest's 120 s hang guard is per test, so these get a wider one. Nothing here is timed.
pytestmark = pytest.mark.timeout(900)


def config(tmp_path, tg: FakeTelegram) -> str:
    path = tmp_path / "memgate.toml"
    path.write_text(f"""
[channels.console]
enabled = false
[channels.telegram]
enabled = true
base_url = "{tg.base_url}"
poll_timeout = 1
[access]
owners = ["telegram:1"]
[api]
port = 0
""")
    return str(path)


async def memgate(env, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, off the loop (the fake Telegram in this process must keep answering)."""
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT,
                                   capture_output=True, text=True, timeout=CLI_TIMEOUT)


async def start_gateway(env, data):
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "run", env=env, cwd=ROOT,
                                                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    while _published_pid(data) != proc.pid:  # the gateway publishes its address once it listens
        if proc.returncode is not None:
            raise AssertionError((await proc.stderr.read()).decode()[-2000:])
        await asyncio.sleep(0.1)
    return proc


def _published_pid(data) -> int | None:
    try:
        return json.loads((data / "api.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None  # not there yet, or caught half-written


async def stranger_code(tg: FakeTelegram, user: int = 501) -> str:
    tg.inject_message(user, "hello, may I talk to you?", first_name="Stranger")
    await tg.wait_until(lambda: any(PAIRING_CODE.search(t) for t in tg.sent_texts(user)), 60)
    return next(PAIRING_CODE.search(t).group(1) for t in tg.sent_texts(user) if PAIRING_CODE.search(t))


async def test_pairing_keys_memory_and_jobs_work_while_the_gateway_runs(tmp_path, fake_llm):
    async with FakeTelegram() as tg:
        env = env_for(tmp_path, fake_llm, TELEGRAM_BOT_TOKEN=tg.token)
        env["MEMGATE_CONFIG"] = config(tmp_path, tg)
        data = tmp_path / "data"
        proc = await start_gateway(env, data)
        try:
            code = await stranger_code(tg)
            listed = await memgate(env, "pairing", "list")
            assert listed.returncode == 0, listed.stderr
            assert code in listed.stdout and "telegram:501" in listed.stdout
            approved = await memgate(env, "pairing", "approve", code.lower())
            assert approved.returncode == 0, approved.stderr
            assert approved.stdout.strip() == "approved telegram:501 as user"
            # The stranger is now let in: the gateway answers with the agent, not a pairing code.
            before = len(tg.sent_texts(501))
            tg.inject_message(501, "thanks!", first_name="Stranger")
            await tg.wait_until(lambda: len(tg.sent_texts(501)) > before, 60)
            assert not PAIRING_CODE.search(tg.sent_texts(501)[-1])
            # A wrong code is the access layer's own one-line message, through the API.
            wrong = await memgate(env, "pairing", "approve", "ZZZZZZZZ")
            assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
            assert len(wrong.stderr.strip().splitlines()) == 1 and wrong.stderr.startswith("memgate: ")

            made = await memgate(env, "keys", "create", "--user", "telegram:501", "--scope", "write", "--name", "phone")
            assert made.returncode == 0, made.stderr
            key = made.stdout.strip()
            assert key.startswith("mg_") and "shown once" in made.stderr
            space = re.search(r"write key for (\S+),", made.stderr).group(1)
            url = json.loads((data / "api.json").read_text())["url"]
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{url}/api/v1/memories", headers={"Authorization": f"Bearer {key}"},
                                     json={"content": "The spare key hangs behind the red door.", "pinned": True}) as r:
                    assert r.status == 201
            keys = await memgate(env, "keys", "list")
            assert key[:10] in keys.stdout and "phone" in keys.stdout and key not in keys.stdout
            revoked = await memgate(env, "keys", "revoke", key[:10])
            assert revoked.returncode == 0 and "revoked" in revoked.stdout

            jobs = await memgate(env, "jobs")
            assert jobs.returncode == 0 and "rebuild_fts" in jobs.stdout, jobs.stderr
            online = await memgate(env, "memory", "list", "--space", space)
            assert online.returncode == 0, online.stderr
            assert "pinned The spare key hangs behind the red door." in online.stdout
            found = await memgate(env, "memory", "search", "where is the spare key", "--space", space)
            assert found.returncode == 0 and "The spare key hangs" in found.stdout, found.stderr
            nothing = await memgate(env, "memory", "search", "spare key", "--space", "u_nobody")
            assert nothing.stdout.strip() == "nothing found"
            locked = await memgate(env, "reembed")
            assert locked.returncode == 3 and "stop it" in locked.stderr and "Traceback" not in locked.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 120) == 0
        assert not (data / "api.json").exists() and not (data / "api.token").exists()
        # With the gateway gone the same commands open the file and print the same lines.
        offline = await memgate(env, "memory", "list", "--space", space)
        assert offline.returncode == 0 and offline.stdout == online.stdout
        again = await memgate(env, "memory", "search", "where is the spare key", "--space", space)
        # Scores carry recency, which moves with the clock: the lines after the score must match.
        assert again.stdout.split("  ", 1)[1] == found.stdout.split("  ", 1)[1]
        offline_keys = await memgate(env, "keys", "list")
        assert offline_keys.returncode == 0 and key[:10] in offline_keys.stdout and "revoked" in offline_keys.stdout


async def test_a_killed_gateways_stale_address_falls_back_to_the_database(tmp_path, fake_llm):
    async with FakeTelegram() as tg:
        env = env_for(tmp_path, fake_llm, TELEGRAM_BOT_TOKEN=tg.token)
        env["MEMGATE_CONFIG"] = config(tmp_path, tg)
        data = tmp_path / "data"
        proc = await start_gateway(env, data)
        code = await stranger_code(tg)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert (data / "api.json").exists()  # nobody cleaned up: the files point at a dead gateway
    approved = await memgate(env, "pairing", "approve", code)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == "approved telegram:501 as user"


async def test_an_address_that_accepts_but_never_answers_does_not_hang_the_cli(tmp_path):
    """A port someone else holds (listening, silent) and a pid that is alive: the probe times out."""
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    data = tmp_path / "data"
    data.mkdir(parents=True)
    import os

    (data / "api.json").write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": os.getpid()}))
    (data / "api.token").write_text("mg_stale\n")
    async with silent:
        out = await memgate(env_for(tmp_path), "pairing", "list")
    assert out.returncode == 0 and out.stdout == "" and "Traceback" not in out.stderr, out.stderr
