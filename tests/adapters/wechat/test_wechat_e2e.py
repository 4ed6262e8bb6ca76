"""WeChat through the whole bot: the real iLink and Official Account adapters against their fakes,
the real gateway, access control, agent, litellm and DuckDB, and the fake LLM.

iLink: memory across a restart of the whole app (cursor persisted: no duplicate, no gap),
pairing, session expiry (-14) told to the owner on another channel and recovered by a new
login, a reply outside the window (ret -2) counted, logged and told to the owner with nothing else lost.
Official Account: passive and customer-service answers, a retried MsgId answered once, pairing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from adapters.wechat.ilink.login import login
from adapters.wechat.ilink.adapter import WechatIlinkAdapter
from adapters.wechat.ilink.state import CURSOR_FILE
from adapters.wechat.mp.adapter import WechatMpAdapter
from bot.app import App, build_app, open_store
from bot.config import load_settings
from bot.access.pairing import APPROVED_TEXT
from bot.settings import Settings
from memory.text import MEMORY_OPEN
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.ilink import FakeIlink
from tests.fakes.llm_server import After, Delay
from tests.fakes.wechat_mp import FakeMpApi, WechatClient, make_aes_key

ALICE = "alice@im.wechat"
BOB = "bob@im.wechat"
CAROL = "carol@im.wechat"
ROOT = "root"  # the terminal user, reached through the "console" channel
MP_TOKEN = "tok-e2e-51f0"
MP_APP_ID = "wx0e2e0e2e0e2e0e2e"
MP_SECRET = "sec-e2e-8d7c6b5a"
MP_ALICE = "oAlice-0001"
MP_BOB = "oBob-0002"
CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


def reply_requests(fake_llm) -> list[dict]:
    """The agent's reply calls (not ingestion, tasks or skills)."""
    return [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You are memgate")]


def said(text: str) -> str:
    """What the brain's answer echoes of the user's message ("... You said: <text>")."""
    return text.rsplit("You said: ", 1)[-1]


def pairing_code(text: str) -> str:
    match = CODE.search(text)
    assert match, f"no pairing code in {text!r}"
    return match.group(1)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for a condition; the timeout only guards against a hang, it asserts no timing."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)
    assert predicate(), what


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def settings_for(data_dir: Path, fake_llm) -> Callable[..., Settings]:
    def make(**env: str) -> Settings:
        base = {"MEMGATE_DATA_DIR": str(data_dir), "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64",
                "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test"}
        base.update(env)
        return load_settings(None, env=base)

    fake_llm.responder = brain.respond
    return make


@pytest.fixture
async def ilink() -> AsyncIterator[FakeIlink]:
    async with FakeIlink(longpoll_ms=200) as server:
        yield server


def ilink_adapter(data_dir: Path) -> WechatIlinkAdapter:
    # No on_trouble: build_app wires it to the gateway's notify_owner.
    return WechatIlinkAdapter(data_dir, backoff_base=0.01, credentials_check_interval=0.05, typing_interval=3600)


def stored_role(app: App, channel: str, external_id: str) -> str | None:
    """The stored role (read after the app closed: open the database file again)."""
    store = open_store(app.settings)
    try:
        row = store.read(lambda con: con.execute(
            "SELECT role FROM identities WHERE channel = ? AND external_id = ?", [channel, external_id]).fetchone())
    finally:
        store.close()
    return row[0] if row else None


def clean(fake: FakeIlink) -> None:
    assert fake.header_errors == []
    assert fake.protocol_errors == []


# -- iLink ---------------------------------------------------------------------------------------


async def test_ilink_conversation_remembers_across_a_restart_without_duplicate_or_gap(
    ilink: FakeIlink, settings_for, data_dir: Path, fake_llm, clock, embedder
) -> None:
    ilink.write_credentials(data_dir)
    ilink.batch_limit = 2  # several batches, so the cursor moves more than once
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat:{ALICE}")
    first = ["My cat is called Miso and she sleeps on the piano.", "I also grow tomatoes on the balcony."]

    app = build_app(settings, channels=[ilink_adapter(data_dir)], clock=clock.now, embedder=embedder)
    async with app:
        for text in first:
            ilink.inject_text(ALICE, text)
        await ilink.wait_for_sent(2, timeout=30)
    assert (data_dir / CURSOR_FILE).exists()
    acked_at_exit = ilink.acked_seq

    # Written while the bot was down: the next run must answer them, once each, in order.
    down = ["Are you there?", "I was away for a while."]
    for text in down:
        ilink.inject_text(ALICE, text)
    clock.advance(days=1)  # a new session: only long-term memory links the two runs

    app = build_app(settings, channels=[ilink_adapter(data_dir)], clock=clock.now, embedder=embedder)
    async with app:
        await ilink.wait_for_sent(4, timeout=30)
        ilink.inject_text(ALICE, "What is the name of my cat?")
        await ilink.wait_for_sent(5, timeout=30)
        await ilink.wait_for(lambda: ilink.unacknowledged() == [], what="every message acknowledged")

    assert acked_at_exit == 2
    assert ilink.duplicates() == []
    assert [said(t) for t in ilink.texts_to(ALICE)] == [*first, *down, "What is the name of my cat?"]
    # Every message reached the model exactly once, so nothing was skipped or repeated on the way.
    asked = [r["messages"][-1]["content"] for r in reply_requests(fake_llm)]
    assert asked == [*first, *down, "What is the name of my cat?"]
    system = reply_requests(fake_llm)[-1]["messages"][0]["content"]
    assert MEMORY_OPEN in system and "Miso" in system.split(MEMORY_OPEN, 1)[1]
    clean(ilink)


async def test_ilink_strangers_get_a_code_and_are_answered_once_an_owner_approves(
    ilink: FakeIlink, settings_for, data_dir: Path, fake_llm, clock, embedder
) -> None:
    ilink.write_credentials(data_dir)
    console = RecordingChannel("console")
    # Two owners: Alice approves on WeChat itself, Root on the terminal. DM policy: pairing (the default).
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat:{ALICE},console:{ROOT}")
    app = build_app(settings, channels=[ilink_adapter(data_dir), console], clock=clock.now, embedder=embedder)
    async with app:
        ilink.inject_text(BOB, "hello, who are you?")
        ilink.inject_text(CAROL, "hi bot")
        await ilink.wait_for(lambda: bool(ilink.texts_to(BOB) and ilink.texts_to(CAROL)), 30, "both strangers answered")
        bob_code, carol_code = pairing_code(ilink.texts_to(BOB)[0]), pairing_code(ilink.texts_to(CAROL)[0])
        assert bob_code != carol_code

        ilink.inject_text(ALICE, f"/approve {bob_code}")
        await ilink.wait_for(lambda: len(ilink.texts_to(ALICE)) == 1, 30, "the owner's /approve answered")
        await console.say(ROOT, f"/approve {carol_code}")
        by_console = (await console.wait_for(1))[0].text

        # Each is told on WeChat that they were let in, whoever approved and wherever.
        await ilink.wait_for(lambda: len(ilink.texts_to(BOB)) == len(ilink.texts_to(CAROL)) == 2, 30, "both told")
        ilink.inject_text(BOB, "hello again")
        ilink.inject_text(CAROL, "hi again")
        await ilink.wait_for(lambda: len(ilink.texts_to(BOB)) == len(ilink.texts_to(CAROL)) == 3, 30, "both answered")

    assert ilink.texts_to(ALICE)[0].startswith(f"Approved {BOB} (wechat:{BOB}) as user")
    assert by_console.startswith(f"Approved {CAROL} (wechat:{CAROL}) as user")
    assert ilink.texts_to(BOB)[1] == ilink.texts_to(CAROL)[1] == APPROVED_TEXT
    assert said(ilink.texts_to(BOB)[2]) == "hello again"
    assert said(ilink.texts_to(CAROL)[2]) == "hi again"
    # The strangers' first messages never reached the model.
    assert sorted(r["messages"][-1]["content"] for r in reply_requests(fake_llm)) == ["hello again", "hi again"]
    assert stored_role(app, "wechat", BOB) == stored_role(app, "wechat", CAROL) == "user"
    clean(ilink)


async def test_ilink_session_expiry_tells_the_owner_on_another_channel_and_resumes_after_login(
    ilink: FakeIlink, settings_for, data_dir: Path, clock, embedder
) -> None:
    ilink.write_credentials(data_dir)
    console = RecordingChannel("console")
    # Alice owns the bot on WeChat and Root on the terminal: with WeChat dead, only Root can hear it.
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat:{ALICE},console:{ROOT}")
    adapter = ilink_adapter(data_dir)
    app = build_app(settings, channels=[adapter, console], clock=clock.now, embedder=embedder)
    async with app:
        ilink.inject_text(ALICE, "before")
        await ilink.wait_for_sent(1, timeout=30)
        clock.advance(minutes=1)
        await console.say(ROOT, "/whoami")
        await console.wait_for(1)

        ilink.expire_session()
        await console.wait_for(2)
        assert adapter.session_expired
        ilink.inject_text(ALICE, "during the outage")  # held by WeChat until the bot is back
        notices_before_login = len(console.sent)

        await login(ilink.base_url, data_dir, out=lambda _: None, poll_interval=0.01, timeout=10)
        await ilink.wait_for_sent(2, timeout=30)
        ilink.inject_text(ALICE, "after")
        await ilink.wait_for_sent(3, timeout=30)

    # The owner the gateway tried first is on the dead channel: WeChat refused (-14), the terminal got it.
    assert ilink.expired_calls["sendmessage"] == 1
    notice = console.sent[1]
    assert (notice.channel, notice.chat_id) == ("console", ROOT)
    assert "errcode -14" in notice.text and "memgate wechat login" in notice.text
    assert notices_before_login == len(console.sent) == 2  # told once, no notice loop
    assert [said(t) for t in ilink.texts_to(ALICE)] == ["before", "during the outage", "after"]
    assert adapter.stats["expired"] == 1
    assert not adapter.session_expired
    assert ilink.duplicates() == []
    clean(ilink)


async def test_ilink_message_arriving_during_shutdown_is_answered_after_the_restart(
    ilink: FakeIlink, settings_for, data_dir: Path, fake_llm, clock, embedder
) -> None:
    ilink.write_credentials(data_dir)
    fake_llm.responder = slow_replies(1.0)  # the first run is still answering when it is told to stop
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat:{ALICE}")
    app = build_app(settings, channels=[ilink_adapter(data_dir)], clock=clock.now, embedder=embedder)
    await app.__aenter__()
    try:
        ilink.inject_text(ALICE, "first")
        await until(lambda: len(reply_requests(fake_llm)) == 1, "the first turn under way")
    except BaseException:
        await app.__aexit__(None, None, None)
        raise
    stopping = asyncio.create_task(app.__aexit__(None, None, None))
    await asyncio.sleep(0.05)  # the shutdown is under way; either run may take the next message
    ilink.inject_text(ALICE, "written during the shutdown")
    await stopping

    fake_llm.responder = brain.respond
    app = build_app(settings, channels=[ilink_adapter(data_dir)], clock=clock.now, embedder=embedder)
    async with app:
        ilink.inject_text(ALICE, "after the restart")
        await ilink.wait_for(lambda: "after the restart" in map(said, ilink.texts_to(ALICE)), 30, "the last answer")

    assert [said(t) for t in ilink.texts_to(ALICE)] == ["first", "written during the shutdown", "after the restart"]
    assert ilink.duplicates() == []


async def test_ilink_reply_outside_the_window_is_told_to_the_owner_and_nothing_else_is_lost(
    ilink: FakeIlink, settings_for, data_dir: Path, clock, embedder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    ilink.write_credentials(data_dir)
    adapter = ilink_adapter(data_dir)
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat:{ALICE}")
    app = build_app(settings, channels=[adapter], clock=clock.now, embedder=embedder)
    async with app:
        ilink.inject_text(ALICE, "first")
        await ilink.wait_for_sent(1, timeout=30)
        ilink.fail_send_next(-2)
        ilink.inject_text(ALICE, "my bike is a green Brompton")
        await ilink.wait_for(lambda: adapter.stats["send_failed"] == 1, 30, "the refused send")
        ilink.inject_text(ALICE, "third")
        await ilink.wait_for_sent(3, timeout=30)
        await app.gateway.idle()
        captured = app.store.read(lambda con: con.execute("SELECT payload FROM ingest_queue").fetchall())

    # The owner (Alice herself here) is told, through the gateway's notify_owner.
    first, notice, third = ilink.texts_to(ALICE)
    assert [said(first), said(third)] == ["first", "third"]
    assert notice.startswith(f"WeChat did not deliver a reply to {ALICE} (ret -2)")
    assert adapter.stats["send_failed"] == 1 and adapter.stats["sent"] == 3
    # Reported: the adapter's error names ret -2, the outbox says which reply it closed (a -2 is
    # permanent: retrying cannot reopen the window).
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(r.name == "adapters.wechat.ilink.outbound" and "ret -2" in r.getMessage() for r in errors)
    assert any(r.name == "bot.delivery.outbox" and "on wechat cannot be delivered" in r.getMessage() for r in errors)
    # The words of the turn whose answer was lost are kept.
    assert any("green Brompton" in payload for (payload,) in captured)
    clean(ilink)


# -- Official Account ------------------------------------------------------------------------------


@pytest.fixture
async def mp_api() -> AsyncIterator[FakeMpApi]:
    async with FakeMpApi(MP_APP_ID, MP_SECRET) as server:
        yield server


@asynccontextmanager
async def mp_app(
    settings: Settings, mp_api: FakeMpApi, clock, embedder, *, passive_timeout: float, aes_key: str | None = None,
    extra: tuple = (), **client_kw: float,
) -> AsyncIterator[tuple[App, WechatMpAdapter, WechatClient]]:
    adapter = WechatMpAdapter(token=MP_TOKEN, app_id=MP_APP_ID, app_secret=MP_SECRET, encoding_aes_key=aes_key,
                              port=0, api_base=mp_api.base, passive_timeout=passive_timeout)
    app = build_app(settings, channels=[adapter, *extra], clock=clock.now, embedder=embedder)
    async with app:
        client_kw.setdefault("retry_interval", 0.01)
        yield app, adapter, WechatClient(adapter.url, MP_TOKEN, MP_APP_ID, aes_key, **client_kw)


def slow_replies(seconds: float) -> Callable[[dict], object]:
    """The brain, but every reply call takes `seconds` (ingestion stays fast)."""
    def respond(request: dict) -> object:
        answer = brain.respond(request)
        return Delay(seconds, answer) if request["messages"][0]["content"].startswith("You are memgate") else answer

    return respond


async def test_mp_text_is_answered_passively_by_the_agent_in_safe_mode(mp_api, settings_for, fake_llm, clock, embedder):
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat_mp:{MP_ALICE}")
    aes_key = make_aes_key()  # encrypted both ways; the pairing test below runs in plain mode
    async with mp_app(settings, mp_api, clock, embedder, passive_timeout=4.0, aes_key=aes_key) as (_, adapter, client):
        result = await client.push(client.text_xml(MP_ALICE, "我喜欢喝乌龙茶"))

    assert result.status == 200 and result.attempts == 1
    assert "乌龙茶" not in result.body  # the client decrypted and checked the signature
    assert result.reply is not None and result.reply.to_user == MP_ALICE
    assert said(result.reply.content) == "我喜欢喝乌龙茶"
    assert mp_api.sent == [] and adapter.stats.passive_replies == 1


async def test_mp_slow_answer_goes_through_the_customer_service_api(mp_api, settings_for, fake_llm, clock, embedder):
    fake_llm.responder = slow_replies(1.0)
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat_mp:{MP_ALICE}")
    async with mp_app(settings, mp_api, clock, embedder, passive_timeout=0.3) as (_, adapter, client):
        result = await client.push(client.text_xml(MP_ALICE, "plan my week please"))
        assert result.body == "success" and result.reply is None  # nothing ready in time
        await until(lambda: len(mp_api.sent) == 1, "the customer-service message")

    assert mp_api.sent[0].touser == MP_ALICE
    assert said(mp_api.sent[0].content) == "plan my week please"
    assert result.attempts == 1  # "success" stops WeChat's retries
    assert adapter.stats.api_messages == 1 and adapter.stats.passive_replies == 0
    assert len(reply_requests(fake_llm)) == 1


async def test_mp_retried_msgid_is_answered_once(mp_api, settings_for, fake_llm, clock, embedder):
    # WeChat gives up on an attempt after `timeout` (5 s in life, 1.5 s here) and retries the push.
    # The reply is held until the second attempt has started, so the first is always abandoned
    # whatever the machine's load, and the second has the whole 1.5 s to carry it (a fixed 0.8 s
    # reply against 0.5 s attempts once missed the second attempt's window on a loaded CI machine).
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat_mp:{MP_ALICE}")
    async with mp_app(settings, mp_api, clock, embedder, passive_timeout=4.0, timeout=1.5) as (app, adapter, client):
        def respond(request: dict) -> object:
            answer = brain.respond(request)
            replying = request["messages"][0]["content"].startswith("You are memgate")
            return After(lambda: client.wait_attempts(2), answer) if replying else answer

        await app.warmed_up()  # a first turn that still imports litellm would outlast every attempt
        fake_llm.responder = respond
        xml = client.text_xml(MP_ALICE, "only once please", msg_id="5500001")
        result = await client.push(xml)
        again = await client.push(xml)  # a late retry after the answer: the same reply, no new turn
        await app.gateway.idle()

    assert result.attempts >= 2  # the first attempt was abandoned, a retry got the answer
    assert result.reply is not None and said(result.reply.content) == "only once please"
    assert again.reply is not None and again.reply.content == result.reply.content
    assert [r["messages"][-1]["content"] for r in reply_requests(fake_llm)] == ["only once please"]
    assert adapter.stats.received == 1 and adapter.stats.duplicates >= 2
    assert mp_api.sent == []


async def test_mp_stranger_gets_a_code_and_is_answered_once_the_owner_approves(
    mp_api, settings_for, fake_llm, clock, embedder
):
    console = RecordingChannel("console")
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"console:{ROOT}")
    async with mp_app(settings, mp_api, clock, embedder, passive_timeout=4.0, extra=(console,)) as (_, _a, client):
        first = await client.push(client.text_xml(MP_BOB, "hello there"))
        assert first.reply is not None
        code = pairing_code(first.reply.content)
        await console.say(ROOT, f"/approve {code}")
        assert (await console.wait_for(1))[0].text.startswith(f"Approved {MP_BOB} (wechat_mp:{MP_BOB}) as user")
        second = await client.push(client.text_xml(MP_BOB, "hello again"))

    assert second.reply is not None and said(second.reply.content) == "hello again"
    assert [r["messages"][-1]["content"] for r in reply_requests(fake_llm)] == ["hello again"]
    # Told they were let in: no callback was waiting, so through the customer-service API.
    assert [(m.touser, m.content) for m in mp_api.sent] == [(MP_BOB, APPROVED_TEXT)]
