"""Reliability scenario of the CLI through a running gateway (issue 11 section 4): pairing
approvals given by `memgate pairing approve` while `memgate run` is up are stored by the gateway
and survive its SIGKILL; the local admin token never leaves its mode-600 file."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from tests.bot.cli.test_cli import env_for
from tests.bot.cli.test_cli_gateway import PAIRING_CODE, config, memgate, start_gateway, stranger_code
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.harness import Counts, assert_safe, scenario

NAME = "cli: pairing approved through the running gateway, then SIGKILL and restart"
STRANGERS = (601, 602, 603)


@scenario(NAME)
async def approvals_through_the_gateway_survive_a_kill(tmp: Path) -> Counts:
    async with FakeLLM() as llm, FakeTelegram() as tg:
        env = env_for(tmp, llm, TELEGRAM_BOT_TOKEN=tg.token)
        env["MEMGATE_CONFIG"] = config(tmp, tg)
        data = tmp / "data"
        proc = await start_gateway(env, data)
        token = (data / "api.token").read_text().strip()
        leaked = int((data / "api.token").stat().st_mode & 0o777 != 0o600)
        approved = 0
        try:
            for user in STRANGERS:
                out = await memgate(env, "pairing", "approve", await stranger_code(tg, user))
                approved += out.returncode == 0 and out.stdout.startswith(f"approved telegram:{user} ")
                leaked += token in out.stdout + out.stderr
        finally:
            proc.send_signal(signal.SIGKILL)
            _, err = await proc.communicate()
        leaked += token in err.decode(errors="replace")
        proc = await start_gateway(env, data)  # over the stale api.json the killed one left
        answered = 0
        try:
            for user in STRANGERS:
                before = len(tg.sent_texts(user))
                tg.inject_message(user, "am I in now?", first_name="Stranger")
                await tg.wait_until(lambda u=user, b=before: len(tg.sent_texts(u)) > b, 60)
                answered += not PAIRING_CODE.search(tg.sent_texts(user)[-1])
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 120)
        leaked += token in err.decode(errors="replace") or any(token in t for t in tg.sent_texts())
    n = len(STRANGERS)
    return Counts(NAME, messages_in=n, answered=answered, stored=min(approved, answered), lost=n - min(approved, answered),
                  leaked=leaked, note=json.dumps({"approved_via_api": approved}))


@pytest.mark.timeout(900)  # two gateway starts and three CLI runs: slow on a loaded machine, never timed
async def test_approvals_through_the_gateway_survive_a_kill(tmp_path):
    counts = await approvals_through_the_gateway_survive_a_kill(tmp_path)
    assert counts.stored == counts.messages_in
    assert_safe(counts)
