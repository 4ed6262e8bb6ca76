"""`memgate memory erase` (issue 35) with and without a running gateway, as an operator uses it:
real subprocesses, Telegram through the fake Bot API, the fake LLM. The plan is printed first and
nothing is erased without --yes (or a typed 'erase'); the erased person's words are in no file of
the data folder afterwards while the other person's are (the database's text is stored plain for
the scan: tests/bytescan.py); the erased person is a stranger again (a pairing code). `memory list`
shows every kind by default and `memgate jobs` the turns waiting to become memory. The gateway's log
holds none of what people said."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest

from tests.bot.cli.test_cli import ROOT, env_for
from tests.bot.cli.test_cli_gateway import PAIRING_CODE, _published_pid, config, stranger_code
from tests.bytescan import find
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.timeout(900)
# The CLI with DuckDB writing plain (uncompressed) segments, so a byte scan sees every stored word.
PLAIN = ["-c", "import sys; from tests.bytescan import install_plain_duckdb; install_plain_duckdb(); "
               "from bot.cli import main; sys.exit(main(sys.argv[1:]))"]
ALICE, BOB = 501, 502
ALICE_WORDS, BOB_WORDS = "QUOKKAMARBLE7731", "MANGOFJORD9902"


async def cli(env, *args: str) -> subprocess.CompletedProcess:
    return await asyncio.to_thread(subprocess.run, [sys.executable, *PLAIN, *args], env=env, cwd=ROOT,
                                   capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


async def said(tg: FakeTelegram, user: int, text: str) -> str:
    before = len(tg.sent_texts(user))
    tg.inject_message(user, text, first_name=f"user{user}")
    await tg.wait_until(lambda: len(tg.sent_texts(user)) > before, 120)
    return tg.sent_texts(user)[-1]


async def test_memory_erase_through_the_gateway_and_offline(tmp_path, fake_llm):
    from tests.fakes import brain

    fake_llm.responder = brain.respond
    async with FakeTelegram() as tg:
        env = env_for(tmp_path, fake_llm, TELEGRAM_BOT_TOKEN=tg.token, MEMGATE_LLM_MEMORY_LLM="false")
        env["MEMGATE_CONFIG"] = config(tmp_path, tg)
        data = tmp_path / "data"
        proc = await asyncio.create_subprocess_exec(sys.executable, *PLAIN, "run", env=env, cwd=ROOT,
                                                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE)
        try:
            while _published_pid(data) != proc.pid:
                assert proc.returncode is None, (await proc.stderr.read()).decode()[-2000:]
                await asyncio.sleep(0.1)
            for user, words in ((ALICE, ALICE_WORDS), (BOB, BOB_WORDS)):
                code = await stranger_code(tg, user)
                assert (await cli(env, "pairing", "approve", code)).returncode == 0
                await said(tg, user, f"/remember my locker code is {words}")
                await said(tg, user, f"the parcel for {words} arrives on Friday")
            listed = await cli(env, "memory", "list", "--user", f"telegram:{ALICE}")
            assert "(fact," in listed.stdout and "(chunk," in listed.stdout, listed.stdout   # every kind by default
            facts = await cli(env, "memory", "list", "--user", f"telegram:{ALICE}", "--kind", "fact")
            assert "(chunk," not in facts.stdout
            jobs = await cli(env, "jobs")
            assert jobs.returncode == 0 and "Ingest queue:" in jobs.stdout, jobs.stderr

            # The log never held what people said (message text is logged at DEBUG only).
            assert (data / "memgate.log").exists()
            before = find(data, [ALICE_WORDS, BOB_WORDS])
            assert not [f for f in before[ALICE_WORDS] + before[BOB_WORDS] if f.startswith("memgate.log")], before

            asked = await cli(env, "memory", "erase", "--user", f"telegram:{ALICE}")
            assert asked.returncode == 1 and "would erase" in asked.stdout and "1 fact" in asked.stdout
            assert "--yes" in asked.stderr
            assert ALICE_WORDS in (await cli(env, "memory", "list", "--user", f"telegram:{ALICE}")).stdout  # nothing erased
            erased = await cli(env, "memory", "erase", "--user", f"telegram:{ALICE}", "--yes")
            assert erased.returncode == 0, erased.stderr
            assert "erased: space" in erased.stdout and f"telegram:{ALICE} is a stranger" in erased.stdout
            assert "group chats stays with those groups" in erased.stdout
            scan = find(data, [ALICE_WORDS, BOB_WORDS])
            assert scan[ALICE_WORDS] == [], scan        # at once, while the gateway runs
            assert "memgate.duckdb" in scan[BOB_WORDS] or "memgate.duckdb.wal" in scan[BOB_WORDS], scan
            # Alice is a stranger: her next message gets a pairing code; Bob is still known.
            assert PAIRING_CODE.search(await said(tg, ALICE, "hello again"))
            gone = await cli(env, "memory", "list", "--user", f"telegram:{ALICE}")
            assert gone.returncode == 2 and "no such identity" in gone.stderr
            assert BOB_WORDS in (await cli(env, "memory", "list", "--user", f"telegram:{BOB}")).stdout
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 120) == 0
    # Offline: the same command on the file.
    refused = await cli(env, "memory", "erase", "--space", "public", "--yes")
    assert refused.returncode == 2 and "public space is everyone's" in refused.stderr
    offline = await cli(env, "memory", "erase", "--user", f"telegram:{BOB}", "--yes")
    assert offline.returncode == 0 and "erased: space" in offline.stdout, offline.stderr
    assert find(data, [BOB_WORDS])[BOB_WORDS] == []
    jobs = await cli(env, "jobs")   # offline: the jobs' due times and the queue, never "next never"
    assert jobs.returncode == 0 and "next never" not in jobs.stdout and "Ingest queue:" in jobs.stdout, jobs.stdout
    export = await cli(env, "memory", "export")
    assert ALICE_WORDS not in export.stdout and BOB_WORDS not in export.stdout
