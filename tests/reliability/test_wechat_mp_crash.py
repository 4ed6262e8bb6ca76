"""WeChat Official Account: SIGKILL of `memgate run` while the reply is being generated, after
the callback answered "success" (WeChat will not post the message again by itself); the restart
answers through the customer-service API, once, even when WeChat's retry of the same MsgId
arrives at the new process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.ports import free_port
from tests.fakes.wechat_mp import FakeMpApi, WechatClient
from tests.reliability.harness import Counts, assert_safe, scenario
from tests.reliability.procs import (is_reply_request, kill, memgate_env, responder, settle, start, stored_user_texts,
                                     tally, terminate, until)

# Real processes started twice each, on a machine that may be busy: far above pytest's default.
pytestmark = pytest.mark.timeout(600)

TOKEN = "tok-crash-7a1"
APP_ID = "wx0c0c0c0c0c0c0c0c"
SECRET = "sec-crash-9f2"
MESSAGES = {"oAna-01": "I keep bees on the roof of my flat.", "oBo-02": "My brother Tomas is a pilot for KLM.",
            "oCy-03": "I am training for a half marathon in Lyon."}


async def _listening(client: WechatClient, proc) -> None:
    async def up() -> bool:
        try:
            return (await client.verify_url("ping"))[0] == 200
        except Exception:
            return False

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 180
    while not await up():
        if proc.returncode is not None or loop.time() > deadline:
            raise AssertionError("the Official Account callback never came up")
        await asyncio.sleep(0.2)


def _answers(api: FakeMpApi, passive: dict[str, int]) -> dict[str, int]:
    return {text: passive.get(text, 0) + sum(1 for m in api.sent if m.touser == user and m.content.endswith(f"You said: {text}"))
            for user, text in MESSAGES.items()}


async def mp_kill(tmp: Path, *, wechat_retries_after_restart: bool) -> Counts:
    name = "wechat mp: SIGKILL during the reply" + (", WeChat retries after the restart" if wechat_retries_after_restart else "")
    port = free_port()
    async with FakeLLM() as llm, FakeMpApi(APP_ID, SECRET) as api:
        config = (f'[channels.wechat_mp]\nenabled = true\nport = {port}\napp_id = "{APP_ID}"\n'
                  f'api_base = "{api.base}"\n')
        env = memgate_env(tmp, llm.base_url, config, WECHAT_MP_TOKEN=TOKEN, WECHAT_MP_APP_SECRET=SECRET)
        client = WechatClient(f"http://127.0.0.1:{port}/wechat", TOKEN, APP_ID, retries=0, timeout=30)
        xmls = {text: client.text_xml(user, text) for user, text in MESSAGES.items()}
        passive: dict[str, int] = {}
        llm.responder = responder(slow_replies=True)
        proc = await start(env, "run")
        try:
            await _listening(client, proc)
            results = await asyncio.gather(*(client.push(xml) for xml in xmls.values()))
            # "success": WeChat takes the message as received and will not post it again.
            assert all(r.status == 200 and r.body == "success" for r in results), results
            await until(lambda: sum(1 for r in llm.requests if is_reply_request(r)) >= len(MESSAGES),
                        "every reply being generated", proc=proc)
        finally:
            await kill(proc)
        llm.responder = responder(slow_replies=False)
        proc = await start(env, "run")
        try:
            await _listening(client, proc)
            if wechat_retries_after_restart:
                for text, xml in xmls.items():
                    result = await client.push(xml)
                    if result.reply is not None and result.reply.content.endswith(f"You said: {text}"):
                        passive[text] = passive.get(text, 0) + 1
            await settle(lambda: all(_answers(api, passive).values()), proc=proc)
        finally:
            await terminate(proc)
        return tally(name, list(MESSAGES.values()), _answers(api, passive), stored_user_texts(tmp / "data"))


@scenario("wechat mp: SIGKILL during the reply")
async def mp_kill_during(tmp: Path) -> Counts:
    return await mp_kill(tmp, wechat_retries_after_restart=False)


@scenario("wechat mp: SIGKILL during the reply, WeChat retries after the restart")
async def mp_kill_then_retry(tmp: Path) -> Counts:
    return await mp_kill(tmp, wechat_retries_after_restart=True)


@pytest.mark.parametrize("run", [mp_kill_during, mp_kill_then_retry])
async def test_wechat_mp_sigkill_loses_nothing_answered_success(tmp_path: Path, run) -> None:
    counts = await run(tmp_path)
    assert counts.messages_in == 3
    assert_safe(counts)
