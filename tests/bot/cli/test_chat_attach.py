"""`memgate chat` attaches to a running gateway (issue 24 item 2): a headless `memgate run` (no
terminal, the API on), then `memgate public add` through it (refused before: the database was
locked), then `memgate chat` in a real pseudo-terminal: the same line editor (the spinner, Ctrl-C
stopping a reply, Tab completing a command), a reply, and the turn in the person's memory, captured by the gateway's own path (inbox, queue, access, agent,
capture). A real gateway, the fake LLM; nothing here is timed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import pytest

from tests.adapters.pty_screen import ROOT, Tty, tty_env
from tests.bot.cli.test_run_without_terminal import headless
from tests.fakes import brain
from tests.fakes.llm_server import Delay
from tests.reliability.procs import HANG, is_reply_request

pytestmark = pytest.mark.timeout(600)  # real subprocesses on a shared 2-core machine


async def memgate(env, *args: str) -> subprocess.CompletedProcess:
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT,
                                   capture_output=True, text=True, timeout=300)


async def admin_get(data, path: str, **query: str) -> dict:
    url = json.loads((data / "api.json").read_text())["url"]
    token = (data / "api.token").read_text().strip()
    async with aiohttp.ClientSession() as http:
        async with http.get(url + path, params=query, headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200, await r.text()
            return await r.json()


async def test_chat_attaches_to_the_running_gateway_and_public_add_goes_through_it(tmp_path, fake_llm):
    hold = asyncio.Event()  # the first reply is being written until the test says so

    def respond(req):
        return Delay(HANG, brain.respond(req)) if is_reply_request(req) and not hold.is_set() else brain.respond(req)

    fake_llm.responder = respond
    env = tty_env(tmp_path, fake_llm.base_url, MEMGATE_API_PORT="0")
    data = tmp_path / "data"
    async with headless([sys.executable, "-m", "bot.cli", "run"], env, ROOT, data) as (url, err, out):
        shared = await memgate(env, "public", "add", "The office wifi is called Falcon.")
        assert shared.returncode == 0 and shared.stdout.startswith("shared ["), shared.stderr
        listed = await memgate(env, "public", "list")
        assert "The office wifi is called Falcon." in listed.stdout, listed.stderr

        tty = Tty(["-m", "bot.cli", "chat", "--user", "ann"], env)
        try:
            await tty.shows("through the running gateway at " + url)
            await tty.prompt("ann> ")
            tty.send("tell me a very long story\r")       # held by the model: the spinner runs...
            await tty.shows("thinking")
            tty.send("\x03")                               # ...and Ctrl-C stops that turn in the gateway
            await tty.shows("reply cancelled")
            await tty.wait_screen(lambda lines: not any("thinking" in line for line in lines), "the spinner gone")
            await tty.prompt("ann> ")
            hold.set()
            tty.send("/hel\t\r")                           # Tab completes the gateway's commands
            await tty.wait_screen(lambda _: "/whoami: who I think you are" in tty.transcript(), "the /help answer")
            await tty.prompt("ann> ")
            tty.send("my bike is green\r")
            # The cancelled line was never answered: it comes before this one in one user message
            # (roles alternate, issue 30 item 4), and the fake echoes that message.
            await tty.wait_screen(lambda lines: any("You said: tell me a very long story" in line for line in lines)
                                  and any(line.strip() == "my bike is green" for line in lines), "the reply to both")
            await tty.prompt("ann> ")
            tty.send("\x04")
            assert await tty.exit_status() == 0
        finally:
            tty.close()
        print("\n--- attached chat transcript ---\n" + tty.transcript())
        # The turn went the gateway's way: its inbox holds the line, in the attached conversation...
        assert "my bike is green" in (data / "console_history").read_text()   # the same line history
        # ...and it is in ann's memory (the same space as `memgate chat --user ann` offline).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180
        while True:
            found = await admin_get(data, "/api/v1/admin/memories/list", user="ann", kind="chunk,fact")
            if any("bike is green" in m["text"] for m in found["memories"]):
                break
            assert loop.time() < deadline, found
            await asyncio.sleep(0.2)
        assert {m["space_id"] for m in found["memories"]} == {found["memories"][0]["space_id"]} != {"public"}
        # A space key attaches too (MEMGATE_API_KEY, as `memgate mcp` takes it): lines piped in here.
        url_token = json.loads((data / "api.json").read_text())["url"], (data / "api.token").read_text().strip()
        async with aiohttp.ClientSession() as http:
            async with http.post(url_token[0] + "/api/v1/admin/keys", json={"scope": "write", "user": "console:ann"},
                                 headers={"Authorization": f"Bearer {url_token[1]}"}) as r:
                assert r.status == 201, await r.text()
                key = (await r.json())["key"]
        piped = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "chat"],
                                        env={**env, "MEMGATE_API_KEY": key}, cwd=ROOT, input="what colour is my bike?\n",
                                        capture_output=True, text=True, timeout=300)
        assert piped.returncode == 0, piped.stderr
        assert "You said: what colour is my bike?" in piped.stdout, piped.stdout
        # A terminal still attached when the gateway stops is told so, in one line, at once.
        still = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "chat", "--user", "bob", env=env,
                                                     cwd=ROOT, stdin=asyncio.subprocess.PIPE,
                                                     stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        still.stdin.write(b"/whoami\n")
        await still.stdin.drain()
        assert "console:bob" in (await asyncio.wait_for(still.stdout.readline(), 120)).decode()
    left = await asyncio.wait_for(still.communicate(), 120)   # the gateway stopped (SIGTERM, exit 0) above
    assert still.returncode == 1 and left[1].decode() == "memgate: the gateway stopped; this chat ended with it\n"
    # With the gateway gone, the same person's memory is what the in-process chat reads.
    offline = await memgate(env, "memory", "list", "--user", "ann", "--kind", "chunk", "--kind", "fact")
    assert offline.returncode == 0 and "bike is green" in offline.stdout, offline.stderr
    no_gateway = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "chat"],
                                         env={**env, "MEMGATE_API_KEY": key}, cwd=ROOT, input="hello\n",
                                         capture_output=True, text=True, timeout=300)
    assert no_gateway.returncode == 2 and no_gateway.stderr.count("\n") == 1 and "memgate run" in no_gateway.stderr
