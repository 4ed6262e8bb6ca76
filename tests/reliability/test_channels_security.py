"""Channel findings of issue 10 (sections 3 and 9) as ledger rows: the whole bot in process (real
DuckDB file, real embedder, litellm against the fake LLM) behind the real adapters, each against
its protocol fake on 127.0.0.1.

- Official Account: a captured callback replayed, downgraded to plaintext, or re-used for another
  openid (leaked = any attack push the bot processed or answered with a reply); a passive reply
  WeChat gave up on; a retry refused as a replay; a throttled customer-service API; a refusal
  (45015) the owner must hear of.
- iLink: ret -2 on send told to the owner; a throttled sendmessage.
- Telegram: commands for another bot in a group (leaked = our replies to them: "/link@other_bot"
  would post a link code in the group); a photo's caption reaching the agent without the photo.

`lost` counts what a person said that was neither answered nor stored, plus any reply that
failed without the owner being told (a silent failure loses the reply for good).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from adapters.wechat.ilink.adapter import WechatIlinkAdapter
from adapters.wechat.mp.adapter import WechatMpAdapter
from bot.app import App, build_app
from bot.config import load_settings
from memory.embed import LocalE5Embedder
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.ilink import FakeIlink
from tests.fakes.llm_server import Delay, FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.wechat_mp import FakeMpApi, WechatClient, make_aes_key
from tests.reliability.harness import SCENARIOS, Counts, assert_safe, scenario

MP_TOKEN = "tok-ledger-77c1"
MP_APP_ID = "wx1edge41edge41edge"
MP_SECRET = "sec-ledger-5e6f7a8b"
ALICE_MP = "oAlice-ledger-0001"
BOB_MP = "oBob-ledger-0002"
ALICE_WX = "alice@im.wechat"
ROOT = "root"
SECRET_FACT = "My bank PIN hint is the blue door, 4711."
GROUP = -1001000000777
GUARD_S = 90.0  # a hang guard, never a timing assertion (the first LLM call of a loaded machine is slow)


def _is_reply(request: dict) -> bool:
    return request["messages"][0]["content"].startswith("You are memgate")


def _slow(seconds: float) -> Callable[[dict], Any]:
    """The brain, but reply turns take `seconds` (ingestion stays fast)."""

    def respond(request: dict) -> Any:
        answer = brain.respond(request)
        return Delay(seconds, answer) if _is_reply(request) else answer

    return respond


async def _until(predicate: Callable[[], bool], timeout: float = GUARD_S) -> bool:
    """Wait for a condition (bounded); the result says whether it came."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.02)
    return predicate()


@asynccontextmanager
async def _bot(tmp: Path, llm: FakeLLM, channels: Sequence[Any], **env: str) -> AsyncIterator[App]:
    """The whole memgate on these channels, data in `tmp`, no config file of the developer's."""
    config = tmp / "memgate.toml"
    config.write_text("")
    base = {"MEMGATE_CONFIG": str(config), "MEMGATE_DATA_DIR": str(tmp / "data"), "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64",
            "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
            "MEMGATE_ACCESS_OWNERS": f"console:{ROOT}", "MEMGATE_ACCESS_DM_POLICY": "open"}
    app = build_app(load_settings(None, env=base | env), channels=channels, embedder=LocalE5Embedder())
    async with app:
        yield app
        await app.gateway.idle()
        await app.engine.worker.drain()


def _stored(app: App, texts: Sequence[str]) -> int:
    """How many of `texts` the bot captured (the durable ingest queue holds every turn)."""
    rows = app.store.read(lambda con: con.execute("SELECT payload FROM ingest_queue").fetchall())
    return sum(1 for text in texts if any(text in payload for (payload,) in rows))


def _mp_adapter(api: FakeMpApi, aes_key: str | None, passive_timeout: float = 4.0) -> WechatMpAdapter:
    return WechatMpAdapter(token=MP_TOKEN, app_id=MP_APP_ID, app_secret=MP_SECRET, encoding_aes_key=aes_key,
                           port=0, api_base=api.base, passive_timeout=passive_timeout)


# -- Official Account -------------------------------------------------------------------------------


async def _mp_attacks(tmp: Path, *, safe: bool) -> Counts:
    """Alice tells the bot a secret; an attacker who captured her callback replays it, posts it as
    plaintext (as Alice and as Bob), and puts other bodies under the captured signature."""
    name = "wechat_mp: replayed callback and plaintext push as another openid" + ("" if safe else " (plaintext account)")
    aes_key = make_aes_key() if safe else None
    async with FakeLLM(responder=brain.respond) as llm, FakeMpApi(MP_APP_ID, MP_SECRET) as api:
        adapter = _mp_adapter(api, aes_key)
        async with _bot(tmp, llm, [adapter]) as app:
            alice = WechatClient(adapter.url, MP_TOKEN, MP_APP_ID, aes_key, retry_interval=0.01)
            genuine = await alice.push(alice.text_xml(ALICE_MP, SECRET_FACT))
            await app.gateway.idle()
            params, body = alice.captured[-1]
            plain = {k: v for k, v in params.items() if k not in ("encrypt_type", "msg_signature")}
            attacks = [
                await alice.post_raw(params, body),  # the exact callback again
                await alice.post_raw(plain, alice.text_xml(ALICE_MP, "/memory").encode()),  # downgraded, as Alice
                await alice.post_raw(plain, alice.text_xml(BOB_MP, "/export").encode()),  # as another openid
                await alice.post_raw(plain, alice.text_xml(BOB_MP, "what is my PIN hint?").encode()),
            ]
            await app.gateway.idle()
            stored = _stored(app, [SECRET_FACT])
            asked = [r["messages"][-1]["content"] for r in llm.requests if _is_reply(r)]
        answered = int(genuine.reply is not None) + sum(1 for m in api.sent if m.touser == ALICE_MP)
        # Any attack the bot took in (a new message, a turn) or answered with more than "success".
        leaked = (adapter.stats.received - 1) + (len(asked) - 1) + sum(
            1 for r in attacks if r.status == 200 and r.body.strip() not in ("", "success"))
        leaked += sum(1 for m in api.sent if m.touser != ALICE_MP)
        refused = sum(1 for r in attacks if r.status == 403)
        return Counts(name, 1, min(answered, 1), stored, lost=1 - max(min(answered, 1), stored), leaked=leaked,
                      answered_twice=max(0, answered - 1), note=f"{refused}/{len(attacks)} attacks refused")


@scenario("wechat_mp: replayed callback and plaintext push as another openid")
async def mp_replay_and_downgrade(tmp: Path) -> Counts:
    return await _mp_attacks(tmp, safe=True)


@scenario("wechat_mp: replayed callback and plaintext push as another openid (plaintext account)")
async def mp_replay_plaintext_account(tmp: Path) -> Counts:
    return await _mp_attacks(tmp, safe=False)


async def _mp_slow_answer(tmp: Path, name: str, *, throttle: bool = False, **client_kw: Any) -> Counts:
    """WeChat gives up on the callback (its 5 s; 0.3 s here) while the agent still thinks (1 s);
    with `throttle`, the customer-service API first answers 429 with Retry-After: 1."""
    text = "Plan my week: gym on Monday, piano on Thursday."
    aes_key = make_aes_key()
    async with FakeLLM(responder=_slow(1.0)) as llm, FakeMpApi(MP_APP_ID, MP_SECRET) as api:
        adapter = _mp_adapter(api, aes_key)
        if throttle:
            api.throttle_next(429, "1")
        async with _bot(tmp, llm, [adapter]) as app:
            client = WechatClient(adapter.url, MP_TOKEN, MP_APP_ID, aes_key, timeout=0.3, retry_interval=0.05,
                                  **client_kw)
            passive = 0  # passive replies WeChat (the client) actually received
            with contextlib.suppress(TimeoutError):
                result = await client.push(client.text_xml(ALICE_MP, text))
                passive = int(result.reply is not None)
            await _until(lambda: len(api.sent) >= 1, timeout=10.0)
            await app.gateway.idle()
            stored = _stored(app, [text])
        answered = sum(1 for m in api.sent if m.touser == ALICE_MP) + passive
        return Counts(name, 1, min(answered, 1), stored, lost=1 - min(answered, 1), leaked=0,
                      answered_twice=max(0, answered - 1),
                      note=f"{getattr(adapter.stats, 'abandoned', 0)} callback(s) WeChat gave up on, {api.send_requests} API calls")


@scenario("wechat_mp: WeChat gives up before the passive reply")
async def mp_gave_up(tmp: Path) -> Counts:
    return await _mp_slow_answer(tmp, "wechat_mp: WeChat gives up before the passive reply", retries=0)


@scenario("wechat_mp: a retry repeating its query is refused as a replay, answered once")
async def mp_retry_same_query(tmp: Path) -> Counts:
    return await _mp_slow_answer(tmp, "wechat_mp: a retry repeating its query is refused as a replay, answered once",
                                 retries=1, resign_retries=False)


@scenario("wechat_mp: customer-service API throttled (429, Retry-After)")
async def mp_throttled(tmp: Path) -> Counts:
    return await _mp_slow_answer(tmp, "wechat_mp: customer-service API throttled (429, Retry-After)", retries=0,
                                 throttle=True)


@scenario("wechat_mp: the API refuses a reply (45015): the owner is told")
async def mp_refused(tmp: Path) -> Counts:
    text = "Remind me what I said about the dentist."
    async with FakeLLM(responder=_slow(0.5)) as llm, FakeMpApi(MP_APP_ID, MP_SECRET) as api:
        adapter = _mp_adapter(api, None, passive_timeout=0.2)  # too slow for a passive reply: the API it is
        console = RecordingChannel("console")
        api.fail_next(45015)
        async with _bot(tmp, llm, [adapter, console]) as app:
            client = WechatClient(adapter.url, MP_TOKEN, MP_APP_ID, None, retry_interval=0.05)
            await client.push(client.text_xml(ALICE_MP, text))
            told = await _until(lambda: any("45015" in t for t in console.texts(ROOT)))
            await app.gateway.idle()
            stored = _stored(app, [text])
        answered = sum(1 for m in api.sent if m.touser == ALICE_MP)
        silent = int(answered == 0 and not told)
        return Counts("wechat_mp: the API refuses a reply (45015): the owner is told", 1, answered, stored,
                      lost=1 - max(answered, stored) + silent, leaked=0,
                      note="owner told" if told else "owner NOT told")


# -- iLink --------------------------------------------------------------------------------------------


async def _ilink(tmp: Path, name: str, fail: Callable[[FakeIlink], None], *, expect_notice: bool) -> Counts:
    texts = ["I moved to Lyon last spring.", "My daughter starts school in September."]
    async with FakeLLM(responder=brain.respond) as llm, FakeIlink(longpoll_ms=200) as ilink:
        data = tmp / "data"
        ilink.write_credentials(data)
        adapter = WechatIlinkAdapter(data, backoff_base=0.01, credentials_check_interval=0.05, typing_interval=3600)
        console = RecordingChannel("console")
        async with _bot(tmp, llm, [adapter, console]) as app:
            ilink.inject_text(ALICE_WX, texts[0])
            await _until(lambda: len(ilink.texts_to(ALICE_WX)) >= 1)
            fail(ilink)
            ilink.inject_text(ALICE_WX, texts[1])
            await _until(lambda: adapter.stats["sent"] + adapter.stats["send_failed"] >= 2)
            told = await _until(lambda: bool(console.texts(ROOT)), timeout=5.0 if expect_notice else 0.5)
            await app.gateway.idle()
            stored = _stored(app, texts)
        answered = len(ilink.texts_to(ALICE_WX))
        silent = int(answered < len(texts) and not told)
        return Counts(name, len(texts), answered, stored, lost=len(texts) - max(answered, stored) + silent, leaked=0,
                      answered_twice=max(0, answered - len(texts)), note="owner told" if told else "")


@scenario("wechat ilink: reply outside the 24 h window (ret -2): the owner is told")
async def ilink_not_delivered(tmp: Path) -> Counts:
    return await _ilink(tmp, "wechat ilink: reply outside the 24 h window (ret -2): the owner is told",
                        lambda fake: fake.fail_send_next(-2), expect_notice=True)


@scenario("wechat ilink: sendmessage throttled (429, Retry-After)")
async def ilink_throttled(tmp: Path) -> Counts:
    return await _ilink(tmp, "wechat ilink: sendmessage throttled (429, Retry-After)",
                        lambda fake: fake.fail_http_next("sendmessage", 429, retry_after="1"), expect_notice=False)


# -- Telegram -----------------------------------------------------------------------------------------


@scenario("telegram: commands for another bot in a group are not answered")
async def telegram_other_bot(tmp: Path) -> Counts:
    owner = 1
    async with FakeLLM(responder=brain.respond) as llm, FakeTelegram() as tg:
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=1, retry_delay=0.01)
        async with _bot(tmp, llm, [adapter], MEMGATE_ACCESS_OWNERS=f"telegram:{owner}",
                        MEMGATE_ACCESS_GROUPS=f"telegram:{GROUP}") as app:
            others = [tg.inject_group_message(owner, text, chat_id=GROUP)
                      for text in ("/link@other_bot", "/memory@other_bot", "/help@other_bot")]
            ours = tg.inject_group_message(owner, f"/help@{tg.bot_username}", chat_id=GROUP)
            # Updates are handled in order: once ours is answered, the others had their turn.
            await _until(lambda: bool(_answers(tg, ours)))
            await app.gateway.idle()
        leaked = sum(len(_answers(tg, m)) for m in others)
        answered = len(_answers(tg, ours))
        return Counts("telegram: commands for another bot in a group are not answered", 1, min(answered, 1), 0,
                      lost=1 - min(answered, 1), leaked=leaked, answered_twice=max(0, answered - 1),
                      note="leaked = our replies to another bot's commands")


@scenario("telegram: a photo's caption tells the agent a picture came with it")
async def telegram_photo_caption(tmp: Path) -> Counts:
    owner = 1
    caption = "What breed is this dog?"
    async with FakeLLM(responder=brain.respond) as llm, FakeTelegram() as tg:
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=1, retry_delay=0.01)
        async with _bot(tmp, llm, [adapter], MEMGATE_ACCESS_OWNERS=f"telegram:{owner}") as app:
            msg = tg.inject_message(owner, photo=True, caption=caption)
            await _until(lambda: bool(_answers(tg, msg)))
            await app.gateway.idle()
            stored = _stored(app, [caption])
        seen = [r["messages"][-1]["content"] for r in llm.requests if _is_reply(r)]
        answered = len(_answers(tg, msg))
        # The picture is part of what the person said: an agent told only the caption lost it.
        told_photo = any(s.startswith("[photo]") and caption in s for s in seen)
        return Counts("telegram: a photo's caption tells the agent a picture came with it", 1, min(answered, 1),
                      stored, lost=1 - min(answered, 1) + int(not told_photo), leaked=0,
                      answered_twice=max(0, answered - 1), note=f"agent saw {seen[:1]!r}")


def _answers(tg: FakeTelegram, msg: dict) -> list[dict]:
    """What the bot sent that quotes `msg` (the first part of each reply does)."""
    return [s for s in tg.sent if s["chat_id"] == msg["chat"]["id"]
            and (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"]]


# -- pytest ---------------------------------------------------------------------------------------------

_ROWS = [name for name, fn in SCENARIOS.items() if fn.__module__ == __name__]


@pytest.mark.parametrize("name", _ROWS)
async def test_channel_scenario_is_safe(tmp_path: Path, name: str) -> None:
    counts = await SCENARIOS[name](tmp_path)
    assert counts.messages_in >= 1, counts
    assert_safe(counts)
