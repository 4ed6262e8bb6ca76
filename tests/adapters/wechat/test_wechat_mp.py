"""The Official Account callback channel against a client playing WeChat and a fake API server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.channel import Channel
from adapters.wechat.mp.adapter import REPLAY_WINDOW_S, TEXT_LIMIT_BYTES, WechatMpAdapter, split_for_wechat
from adapters.wechat.mp.xml_codec import XmlError, build_text_reply, parse_inbound
from bot.errors import ChannelError, ConfigError
from bot.message import Kind, Message, Reply
from tests.fakes.clock import FakeClock
from tests.fakes.wechat_mp import ACCOUNT_ID, FakeMpApi, SentMessage, WechatClient, make_aes_key

TOKEN = "tok-4c1d9e0f7a"
APP_ID = "wx5f3e2d1c0b9a8877"
SECRET = "sec-9b8a7c6d5e4f3a2b1c0d"
OPENID = "oUser-alice-0001"
AES_KEY = make_aes_key()

BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY a "aaaaaaaaaa">'
    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">'
    '<!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>'
    f"<xml><ToUserName>{ACCOUNT_ID}</ToUserName><FromUserName>{OPENID}</FromUserName>"
    "<CreateTime>1767225600</CreateTime><MsgType>text</MsgType><Content>&d;</Content><MsgId>1</MsgId></xml>"
)
EXTERNAL_ENTITY = (
    '<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    f"<xml><ToUserName>{ACCOUNT_ID}</ToUserName><FromUserName>{OPENID}</FromUserName>"
    "<CreateTime>1767225600</CreateTime><MsgType>text</MsgType><Content>&xxe;</Content><MsgId>2</MsgId></xml>"
)


class Gateway:
    """Records what the adapter hands over; `on_message` plays the gateway's reaction."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.on_message: Callable[[Message], Awaitable[None]] | None = None
        self.tasks: list[asyncio.Task] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)
        if self.on_message is not None:
            await self.on_message(message)

    def reply_later(self, adapter: WechatMpAdapter, text_for: Callable[[Message], str]) -> None:
        """Like the real gateway: queue the message, answer from another task."""

        async def on_message(message: Message) -> None:
            reply = Reply(channel="wechat_mp", chat_id=message.chat_id, text=text_for(message), reply_to=message.message_id)
            self.tasks.append(asyncio.create_task(adapter.send(reply)))

        self.on_message = on_message


@pytest.fixture
async def api():
    async with FakeMpApi(APP_ID, SECRET) as server:
        yield server


@contextlib.asynccontextmanager
async def running(api: FakeMpApi, *, aes_key: str | None = None, passive_timeout: float = 2.0, clock=None, **client_kw):
    adapter = WechatMpAdapter(
        token=TOKEN,
        app_id=APP_ID,
        app_secret=SECRET,
        encoding_aes_key=aes_key,
        port=0,
        api_base=api.base,
        passive_timeout=passive_timeout,
        clock=clock,
    )
    gateway = Gateway()
    await adapter.start(gateway)
    client_kw.setdefault("retry_interval", 0.01)
    client = WechatClient(adapter.url, TOKEN, APP_ID, aes_key, **client_kw)
    try:
        yield adapter, gateway, client
    finally:
        await asyncio.gather(*gateway.tasks, return_exceptions=True)
        await adapter.stop()


def reply(text: str, chat_id: str = OPENID, **kw) -> Reply:
    return Reply(channel="wechat_mp", chat_id=chat_id, text=text, **kw)


def no_space(text: str) -> str:
    return "".join(text.split())


# -- lifecycle and URL verification -------------------------------------------------------------------


async def test_is_a_channel_and_binds_an_ephemeral_port(api):
    async with running(api) as (adapter, _, _client):
        assert isinstance(adapter, Channel)
        assert adapter.port > 0
        assert adapter.url == f"http://127.0.0.1:{adapter.port}/wechat"
        async with adapter.typing(Message("wechat_mp", OPENID, OPENID, "x", datetime.now(UTC))):
            pass


async def test_url_verification_echoes_echostr(api):
    async with running(api) as (_, _, client):
        assert await client.verify_url("echo-123") == (200, "echo-123")


async def test_url_verification_with_a_forged_signature_is_refused(api):
    async with running(api) as (adapter, _, client):
        status, text = await client.verify_url("echo-123", forge=True)
        assert status == 403
        assert "echo-123" not in text
        assert adapter.stats.bad_signature == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"passive_timeout": 5.0}, {"passive_timeout": 0}, {"encoding_aes_key": "too-short"}, {"token": ""},
     {"replay_window": 0}, {"replay_window": 301}],
)
def test_bad_configuration_is_a_config_error(kwargs):
    base = dict(token=TOKEN, app_id=APP_ID, app_secret=SECRET, encoding_aes_key=None)
    with pytest.raises(ConfigError):
        WechatMpAdapter(**(base | kwargs))


# -- round trips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("aes_key", [None, AES_KEY], ids=["plain", "safe"])
async def test_round_trip_answers_passively(api, aes_key):
    async with running(api, aes_key=aes_key) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: f"echo: {m.text}")
        result = await client.push(client.text_xml(OPENID, "你好 hello", msg_id="77001", create_time=1767225600))
        assert result.status == 200
        # In safe mode the client has checked the msg_signature and decrypted the reply.
        assert result.reply is not None
        assert result.reply.content == "echo: 你好 hello"
        assert (result.reply.to_user, result.reply.from_user, result.reply.msg_type) == (OPENID, ACCOUNT_ID, "text")
        if aes_key:
            assert "echo" not in result.body  # nothing in clear on the wire
        [message] = gateway.messages
        assert message == Message(
            channel="wechat_mp",
            chat_id=OPENID,
            sender_id=OPENID,
            text="你好 hello",
            timestamp=datetime(2026, 1, 1, tzinfo=UTC),
            is_group=False,
            message_id="77001",
            kind=Kind.TEXT,
        )
        assert api.sent == []
        assert adapter.stats.passive_replies == 1


async def test_reply_sent_from_inside_inbound_is_passive(api):
    async with running(api) as (adapter, gateway, client):

        async def answer_now(message: Message) -> None:
            await adapter.send(reply("at once"))

        gateway.on_message = answer_now
        result = await client.push(client.text_xml(OPENID, "hi"))
        assert result.reply is not None and result.reply.content == "at once"
        assert api.sent == []


async def test_markdown_reply_is_sent_as_plain_text(api):
    async with running(api) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: "**bold** and `code`")
        result = await client.push(client.text_xml(OPENID, "hi"))
        assert result.reply is not None
        assert "**" not in result.reply.content and "`" not in result.reply.content
        assert "bold" in result.reply.content and "code" in result.reply.content


# -- retries and deduplication ------------------------------------------------------------------------


async def test_retry_while_waiting_is_processed_once_and_gets_the_passive_reply(api):
    # The client gives up on the first attempt after 0.5 s (as WeChat does after 5 s) and retries.
    async with running(api, passive_timeout=4.0, timeout=0.5) as (adapter, gateway, client):
        push = asyncio.create_task(client.push(client.text_xml(OPENID, "slow one", msg_id="88001")))
        try:
            async with asyncio.timeout(10):  # a guard against hanging, not a timing assertion
                await client.wait_attempts(2)
                while adapter.stats.duplicates < 1:  # the retry has reached the adapter and waits too
                    await asyncio.sleep(0.01)
            await adapter.send(reply("answer for the retry"))
            result = await push
        finally:
            push.cancel()
            await asyncio.gather(push, return_exceptions=True)
        assert result.attempts >= 2  # 2, unless a loaded machine made the client give up twice
        assert result.reply is not None and result.reply.content == "answer for the retry"
        assert len(gateway.messages) == 1
        assert api.sent == []


async def test_retry_after_the_reply_gets_the_same_reply(api):
    async with running(api, aes_key=AES_KEY) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: "only once")
        xml = client.text_xml(OPENID, "hello", msg_id="88002")
        first = await client.push(xml)
        again = await client.push(xml)  # WeChat never saw the first response
        assert first.reply is not None and again.reply is not None
        assert again.reply.content == first.reply.content == "only once"
        assert len(gateway.messages) == 1
        assert adapter.stats.duplicates == 1


async def test_retry_after_an_api_reply_answers_success_at_once(api):
    async with running(api, passive_timeout=0.2) as (adapter, gateway, client):
        xml = client.text_xml(OPENID, "hello", msg_id="88003")
        first = await client.push(xml)
        assert first.body == "success"
        await adapter.send(reply("late"))
        again = await client.push(xml)
        assert again.body == "success" and again.reply is None
        assert len(gateway.messages) == 1
        assert api.sent == [SentMessage(OPENID, "late")]


async def test_repeated_event_is_one_message(api):
    async with running(api, passive_timeout=0.2) as (_, gateway, client):
        xml = client.event_xml(OPENID, "subscribe", create_time=1767225600)
        await client.push(xml)
        await client.push(xml)
        [message] = gateway.messages
        assert (message.kind, message.text, message.chat_id) == (Kind.OTHER, "", OPENID)


# -- slow and long replies -------------------------------------------------------------------------------


async def test_slow_reply_goes_through_the_customer_service_api(api):
    async with running(api, passive_timeout=0.3) as (adapter, gateway, client):
        result = await client.push(client.text_xml(OPENID, "think hard"))
        assert result.status == 200 and result.body == "success" and result.reply is None
        assert len(gateway.messages) == 1
        # The gateway answers after the passive window closed.
        await adapter.send(reply("thought about it", reply_to=gateway.messages[0].message_id))
        assert api.sent == [SentMessage(OPENID, "thought about it")]
        assert api.token_requests == 1
        assert adapter.stats.api_messages == 1 and adapter.stats.passive_replies == 0


async def test_long_reply_is_split_at_2048_bytes(api):
    paragraphs = [f"第{i}段：" + "这是一段很长的中文回答内容" * 30 for i in range(6)]
    text = "\n\n".join(paragraphs)
    assert len(text.encode()) > 3 * TEXT_LIMIT_BYTES
    async with running(api) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: text)
        result = await client.push(client.text_xml(OPENID, "tell me everything"))
        await asyncio.gather(*gateway.tasks)
        assert result.reply is not None
        parts = [result.reply.content] + [m.content for m in api.sent]
        assert len(parts) >= 4
        assert all(len(part.encode()) <= TEXT_LIMIT_BYTES for part in parts)
        assert all(m.touser == OPENID for m in api.sent)
        assert no_space("".join(parts)) == no_space(text)


def test_split_for_wechat_counts_bytes_not_characters():
    text = "字" * 2000  # 2000 characters, 6000 bytes
    parts = split_for_wechat(text)
    assert len(parts) == 3
    assert all(len(p.encode()) <= TEXT_LIMIT_BYTES for p in parts)
    assert "".join(parts) == text


# -- access token ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("errcode", [40001, 42001])
async def test_refused_access_token_is_refreshed(api, errcode):
    async with running(api) as (adapter, _, _client):
        await adapter.send(reply("one"))
        api.fail_next(errcode)
        await adapter.send(reply("two"))
        assert api.sent == [SentMessage(OPENID, "one"), SentMessage(OPENID, "two")]
        assert api.token_requests == 2
        assert adapter.stats.token_fetches == 2


async def test_expired_access_token_is_refreshed(api):
    async with running(api) as (adapter, _, _client):
        await adapter.send(reply("one"))
        api.expire_tokens()
        await adapter.send(reply("two"))
        assert [m.content for m in api.sent] == ["one", "two"]
        assert api.token_requests == 2


async def test_access_token_is_renewed_before_it_expires():
    clock = FakeClock()
    async with FakeMpApi(APP_ID, SECRET, expires_in=7200) as api:
        async with running(api, clock=clock) as (adapter, _, _client):
            await adapter.send(reply("one"))
            clock.advance(seconds=7200 - 310)
            await adapter.send(reply("two"))
            assert api.token_requests == 1
            clock.advance(seconds=20)  # now within 5 minutes of expiry
            await adapter.send(reply("three"))
            assert api.token_requests == 2
            assert api.send_requests == 3  # renewed ahead: no send was refused
            assert [m.content for m in api.sent] == ["one", "two", "three"]


async def test_wrong_app_secret_is_a_channel_error(api):
    api.app_secret = "something else"
    async with running(api) as (adapter, _, _client):
        with pytest.raises(ChannelError):
            await adapter.send(reply("one"))
        assert adapter.stats.api_failures == 1
        assert api.sent == []


async def test_refused_send_is_a_channel_error(api):
    async with running(api) as (adapter, _, _client):
        api.fail_next(45015)  # reply window over
        with pytest.raises(ChannelError, match="45015"):
            await adapter.send(reply("one"))
        assert adapter.stats.api_failures == 1


async def test_unreachable_api_is_a_channel_error(api):
    async with running(api) as (adapter, _, _client):
        await api.__aexit__(None, None, None)
        with pytest.raises(ChannelError):
            await adapter.send(reply("one"))


# -- rejected pushes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("aes_key", [None, AES_KEY], ids=["plain", "safe"])
async def test_forged_signature_is_refused_and_never_processed(api, aes_key):
    async with running(api, aes_key=aes_key) as (adapter, gateway, client):
        result = await client.push(client.text_xml(OPENID, "let me in"), forge=True)
        assert result.status == 403
        assert result.attempts == 1
        assert gateway.messages == []
        assert adapter.stats.bad_signature == 1


async def test_safe_mode_push_for_another_app_is_rejected(api):
    async with running(api, aes_key=AES_KEY) as (_, gateway, client):
        client.app_id = "wxsomeoneelse000"
        result = await client.push(client.text_xml(OPENID, "hi"))
        assert result.status == 400
        assert gateway.messages == []


@pytest.mark.parametrize("offset", [-(REPLAY_WINDOW_S + 1), REPLAY_WINDOW_S + 1, -301, 301])
async def test_stale_timestamp_is_refused_as_a_replay(api, offset):
    import time

    async with running(api) as (adapter, gateway, client):
        result = await client.push(client.text_xml(OPENID, "old"), timestamp=int(time.time()) + offset)
        assert result.status == 403
        assert gateway.messages == []
        assert adapter.stats.stale_timestamp == 1


@pytest.mark.parametrize("payload", [BILLION_LAUGHS, EXTERNAL_ENTITY], ids=["billion-laughs", "external-entity"])
@pytest.mark.parametrize("aes_key", [None, AES_KEY], ids=["plain", "safe"])
async def test_entity_tricks_are_rejected_and_never_processed(api, payload, aes_key):
    async with running(api, aes_key=aes_key) as (adapter, gateway, client):
        result = await client.push(payload)  # safe mode: the hostile XML arrives encrypted and signed
        assert result.status == 400
        assert gateway.messages == []
        assert adapter.stats.malformed == 1


async def test_entity_tricks_in_the_safe_mode_envelope_are_rejected(api):
    async with running(api, aes_key=AES_KEY) as (_, gateway, client):
        result = await client.push("", raw_body=BILLION_LAUGHS.encode())
        assert result.status == 400
        assert gateway.messages == []


@pytest.mark.parametrize(
    "body",
    [b"", b"not xml at all", b"<xml><ToUserName>x</ToUserName>", b"<other/>", b"<xml><MsgType>text</MsgType></xml>",
     b"<xml><ToUserName>a</ToUserName><FromUserName>b</FromUserName><CreateTime>soon</CreateTime>"
     b"<MsgType>text</MsgType></xml>", b'<?xml version="1.0" encoding="bogus"?><xml/>', b"<xml>" + b"a" * 300_000],
    ids=["empty", "text", "unclosed", "wrong-root", "missing-fields", "bad-time", "bad-encoding", "too-large"],
)
async def test_malformed_xml_is_rejected(api, body):
    async with running(api) as (adapter, gateway, client):
        result = await client.push("", raw_body=body)
        assert result.status == 400
        assert gateway.messages == []
        assert adapter.stats.malformed == 1


@given(st.binary(max_size=300) | st.text(max_size=300).map(lambda t: ("<xml>" + t + "</xml>").encode()))
def test_parser_raises_only_xml_error_on_junk(body):
    with contextlib.suppress(XmlError):
        parse_inbound(body)


@given(st.text(max_size=300), st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_0123456789", min_size=1, max_size=30))
def test_passive_reply_xml_round_trips(content, openid):
    push = parse_inbound(build_text_reply(to_user=openid, from_user=ACCOUNT_ID, create_time=1767225600, content=content))
    assert (push.to_user, push.from_user, push.create_time, push.msg_type) == (openid, ACCOUNT_ID, 1767225600, "text")
    # The parser strips the XML's outer whitespace (and carriage returns are newlines in XML);
    # characters XML cannot carry are dropped; everything else comes back.
    kept = "".join(c for c in content if c in "\t\n\r" or not (ord(c) < 0x20 or c in "\ufffe\uffff"))
    assert push.content == kept.replace("\r\n", "\n").replace("\r", "\n").strip()


# -- message kinds ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("msg_type", "extra", "kind", "text"),
    [
        ("voice", "<MediaId>m</MediaId><Format>amr</Format><Recognition>明天天气</Recognition>", Kind.VOICE, "明天天气"),
        ("voice", "<MediaId>m</MediaId><Format>amr</Format>", Kind.VOICE, ""),
        ("image", "<PicUrl>http://x/y.jpg</PicUrl><MediaId>m</MediaId>", Kind.PHOTO, ""),
        ("video", "<MediaId>m</MediaId>", Kind.VIDEO, ""),
        ("location", "<Location_X>1</Location_X><Location_Y>2</Location_Y>", Kind.OTHER, ""),
        ("link", "<Title>t</Title><Url>http://x</Url>", Kind.OTHER, ""),
    ],
)
async def test_media_pushes_become_their_kind(api, msg_type, extra, kind, text):
    async with running(api, passive_timeout=0.2) as (_, gateway, client):
        await client.push(client.media_xml(OPENID, msg_type, extra))
        [message] = gateway.messages
        assert (message.kind, message.text) == (kind, text)


async def test_events_other_than_subscribe_are_ignored(api):
    async with running(api, passive_timeout=0.2) as (adapter, gateway, client):
        result = await client.push(client.event_xml(OPENID, "unsubscribe"))
        assert result.body == "success"
        assert gateway.messages == []
        assert adapter.stats.ignored == 1


async def test_subscribe_can_be_greeted_passively(api):
    async with running(api) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: "welcome")
        result = await client.push(client.event_xml(OPENID, "subscribe"))
        assert result.reply is not None and result.reply.content == "welcome"


# -- secrets -------------------------------------------------------------------------------------------------


async def test_secrets_never_reach_the_log(api, caplog):
    caplog.set_level(logging.DEBUG)
    async with running(api, aes_key=AES_KEY, passive_timeout=0.2) as (adapter, gateway, client):
        await client.push(client.text_xml(OPENID, "hi"))
        await adapter.send(reply("one"))
        api.fail_next(42001)
        await adapter.send(reply("two"))
        api.fail_next(45015)
        with pytest.raises(ChannelError):
            await adapter.send(reply("three"))
        await client.push(client.text_xml(OPENID, "x"), forge=True)
        issued = api.issued_tokens
    assert len(issued) == 2
    logged = caplog.text
    for secret in (TOKEN, SECRET, AES_KEY, *issued):
        assert secret not in logged


# -- replays and downgrades (issue 10, section 3) ----------------------------------------------------


async def test_plaintext_push_is_refused_when_an_aes_key_is_set(api):
    # The plain `signature` covers token, timestamp and nonce only: anyone holding one callback
    # URL could post any body under it. With a key configured only signed ciphertext counts.
    async with running(api, aes_key=AES_KEY) as (adapter, gateway, _client):
        downgrade = WechatClient(adapter.url, TOKEN, APP_ID, None, retry_interval=0.01)
        gateway.reply_later(adapter, lambda m: "your memories: ...")
        result = await downgrade.push(downgrade.text_xml(OPENID, "/memory"))
        assert result.status == 403 and result.reply is None
        assert gateway.messages == []
        assert adapter.stats.plaintext_refused == 1
        assert api.sent == []


@pytest.mark.parametrize("aes_key", [None, AES_KEY], ids=["plain", "safe"])
async def test_replayed_callback_is_refused(api, aes_key):
    async with running(api, aes_key=aes_key) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: "the answer for alice")
        first = await client.push(client.text_xml(OPENID, "hello"))
        assert first.reply is not None
        [(params, body)] = client.captured
        replay = await client.post_raw(params, body)
        assert replay.status == 403 and replay.reply is None
        assert "the answer" not in replay.body
        assert len(gateway.messages) == 1
        assert adapter.stats.replayed == 1


async def test_captured_plaintext_url_cannot_carry_another_body(api):
    # Plaintext accounts: the signature never covered the body, but its (timestamp, nonce) is spent.
    async with running(api) as (adapter, gateway, client):
        gateway.reply_later(adapter, lambda m: f"hi {m.sender_id}")
        await client.push(client.text_xml(OPENID, "hello"))
        [(params, _body)] = client.captured
        forged = client.text_xml("oSomeoneElse-0002", "/export").encode()
        result = await client.post_raw(params, forged)
        assert result.status == 403
        assert [m.sender_id for m in gateway.messages] == [OPENID]


async def test_retry_repeating_the_query_still_gets_its_reply(api):
    # If WeChat repeats the very query on a retry, the retry is refused as a replay; the reply
    # must still reach the user (through the customer-service API), once.
    async with running(api, passive_timeout=4.0, timeout=0.3, retries=1, resign_retries=False) as (
        adapter, gateway, client,
    ):
        result = await client.push(client.text_xml(OPENID, "slow one", msg_id="88101"))
        assert result.status == 403  # the retry
        async with asyncio.timeout(10):  # a guard against hanging, not a timing assertion
            while adapter.stats.abandoned < 1:  # the first attempt's connection is gone
                await asyncio.sleep(0.01)
        await adapter.send(reply("here it is", reply_to=gateway.messages[0].message_id))
        assert api.sent == [SentMessage(OPENID, "here it is")]
        assert len(gateway.messages) == 1


async def test_passive_reply_that_wechat_gave_up_on_goes_through_the_api(api):
    # WeChat drops the connection (its 5 s, here 0.3 s) while we wait for the gateway.
    async with running(api, passive_timeout=4.0, timeout=0.3, retries=0) as (adapter, gateway, client):
        with pytest.raises(TimeoutError):
            await client.push(client.text_xml(OPENID, "think hard", msg_id="88102"))
        async with asyncio.timeout(10):  # a guard against hanging, not a timing assertion
            while adapter.stats.abandoned < 1:
                await asyncio.sleep(0.01)
        await adapter.send(reply("thought about it", reply_to="88102"))
        assert api.sent == [SentMessage(OPENID, "thought about it")]
        assert adapter.stats.passive_replies == 0


async def test_passive_reply_that_cannot_be_written_goes_through_the_api(api):
    # The reply is ready (from inside inbound) but the connection is already gone when it is written.
    async with running(api, passive_timeout=4.0, timeout=0.3, retries=0) as (adapter, gateway, client):
        gone = asyncio.Event()

        async def answer_after_wechat_left(message: Message) -> None:
            await gone.wait()
            await adapter.send(reply("ready, but too late for the connection"))

        gateway.on_message = answer_after_wechat_left
        push = asyncio.create_task(client.push(client.text_xml(OPENID, "hi", msg_id="88103")))
        with pytest.raises(TimeoutError):
            await push
        # The client has closed its socket: a few turns of the loop let the server read the FIN.
        for _ in range(50):
            await asyncio.sleep(0)
        gone.set()
        async with asyncio.timeout(10):
            while not api.sent:
                await asyncio.sleep(0.01)
        assert api.sent == [SentMessage(OPENID, "ready, but too late for the connection")]


async def test_push_within_the_window_is_accepted_once_per_nonce(api):
    import time

    async with running(api, passive_timeout=0.2) as (adapter, gateway, client):
        edge = int(time.time()) - int(REPLAY_WINDOW_S) + 5
        result = await client.push(client.text_xml(OPENID, "a bit late"), timestamp=edge)
        assert result.status == 200
        assert [m.text for m in gateway.messages] == ["a bit late"]


# -- the customer-service API refuses: the owner hears of it (issue 10, section 9) --------------------


@pytest.mark.parametrize(("errcode", "meaning"), [(45015, "48 hours"), (48001, "not authorised")])
async def test_api_refusal_is_told_to_the_owner_once(api, errcode, meaning):
    told: list[str] = []

    async def owner(text: str) -> None:
        told.append(text)

    async with running(api) as (adapter, _, _client):
        adapter.on_trouble = owner
        for _ in range(2):
            api.fail_next(errcode)
            with pytest.raises(ChannelError, match=str(errcode)):
                await adapter.send(reply("one"))
    assert len(told) == 1  # throttled: the second refusal of the same kind is only logged
    assert str(errcode) in told[0] and meaning in told[0] and OPENID in told[0]


async def test_network_failure_is_not_told_to_the_owner(api):
    told: list[str] = []

    async def owner(text: str) -> None:
        told.append(text)

    async with running(api) as (adapter, _, _client):
        adapter.on_trouble = owner
        await api.__aexit__(None, None, None)
        with pytest.raises(ChannelError):
            await adapter.send(reply("one"))
    assert told == []


async def test_a_notice_that_fails_on_this_channel_raises_no_second_notice(api):
    # The owner is reached through the refusing channel itself: its failure (another errcode, so
    # not throttled) must not raise a notice of its own, and so on without end.
    told: list[str] = []

    async with running(api) as (adapter, _, _client):

        async def owner(text: str) -> None:
            told.append(text)
            api.fail_next(48001)
            await adapter.send(reply(text, chat_id="oOwner-0009"))

        adapter.on_trouble = owner
        api.fail_next(45015)
        with pytest.raises(ChannelError):
            await adapter.send(reply("one"))
    assert len(told) == 1


# -- Retry-After on the customer-service API (issue 10, sections 1 and 9) -----------------------------


@contextlib.asynccontextmanager
async def api_client(api: FakeMpApi):
    """The real customer-service client against the fake API; its waits are recorded, then taken (briefly)."""
    import aiohttp

    from adapters.wechat.mp.adapter import WechatMpStats
    from adapters.wechat.mp.client import CustomerServiceClient

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    async with aiohttp.ClientSession() as session:
        client = CustomerServiceClient(session, api_base=api.base, app_id=APP_ID, app_secret=SECRET,
                                       clock=FakeClock(), stats=WechatMpStats(), sleep=sleep)
        yield client, waits


@pytest.mark.parametrize(("status", "header", "expected"), [
    (429, "7", 7.0),
    (503, "2", 2.0),
    (429, "3600", 30.0),  # capped
    (503, None, 1.0),  # no header: our own backoff
])
async def test_throttled_send_waits_what_the_server_asks_then_delivers(api, status, header, expected):
    async with api_client(api) as (client, waits):
        api.throttle_next(status, header)
        await client.send_text(OPENID, "after the pause")
    assert waits == [expected]
    assert api.sent == [SentMessage(OPENID, "after the pause")]


async def test_throttled_send_gives_up_after_a_bounded_number_of_tries(api):
    from adapters.wechat.mp.client import THROTTLE_ATTEMPTS

    async with api_client(api) as (client, waits):
        api.throttle_next(429, "1", times=THROTTLE_ATTEMPTS)
        with pytest.raises(ChannelError, match="429"):
            await client.send_text(OPENID, "never")
    assert len(waits) == THROTTLE_ATTEMPTS - 1
    assert api.sent == []


def test_replay_window_is_range_checked_in_the_config(tmp_path):
    from bot.config import load_settings

    path = tmp_path / "memgate.toml"
    path.write_text("[channels.wechat_mp]\nreplay_window = 500\n")
    with pytest.raises(ConfigError, match="replay_window"):
        load_settings(path, env={})
    path.write_text("[channels.wechat_mp]\nreplay_window = 30\n")
    assert load_settings(path, env={}).channels.wechat_mp.replay_window == 30


async def test_a_retried_part_of_a_long_reply_is_the_only_one_sent_again(api, tmp_path):
    """Found: an Official Account reply was one outbox unit, so when its third message met a
    transient refusal the outbox retried the whole reply and the person got the first parts
    twice. `split` makes each message its own unit: only the failed one is sent again."""
    from bot.delivery.outbox import OUTBOX_MIGRATIONS, Outbox, OutboxSettings
    from memory.store.connection import Store

    paragraphs = [f"第{i}段：" + "这是一段很长的中文回答内容" * 30 for i in range(6)]
    text = "\n\n".join(paragraphs)
    store = Store(tmp_path / "m.duckdb", 384, extra_migrations=OUTBOX_MIGRATIONS)
    try:
        async with running(api) as (adapter, gateway, client):
            outbox = Outbox(store, {"wechat_mp": adapter}, clock=lambda: datetime.now(UTC),
                            settings=OutboxSettings(retry_base=0.05, poll=0.05))
            pieces = adapter.split(reply(text))
            assert len(pieces) >= 4 and all(len(p.text.encode()) <= TEXT_LIMIT_BYTES for p in pieces)

            async def on_message(message: Message) -> None:
                whole = reply(text, chat_id=message.chat_id, reply_to=message.message_id)
                outbox.put(f"wechat_mp:{message.chat_id}", whole, None)
                gateway.tasks.append(asyncio.create_task(outbox.flush(f"wechat_mp:{message.chat_id}")))

            gateway.on_message = on_message
            api.fail_next(-1)  # the first API message (the reply's second part): "system busy"
            result = await client.push(client.text_xml(OPENID, "tell me everything"))
            await asyncio.gather(*gateway.tasks)
            await outbox.start()
            for _ in range(200):
                if outbox.counts() == {"sent": len(pieces)}:
                    break
                await asyncio.sleep(0.05)
            await outbox.stop()
            assert result.reply is not None
            parts = [result.reply.content] + [m.content for m in api.sent]
            assert len(parts) == len(pieces)  # nothing twice
            assert no_space("".join(parts)) == no_space(text)  # nothing lost, in order
            assert outbox.stats.retried == 1 and outbox.counts() == {"sent": len(pieces)}
    finally:
        store.close()


async def test_media_get_returns_a_file_under_the_cap_and_refuses_one_over_it_as_too_large(api):
    from bot.errors import MediaError

    api.media["small"] = (b"v" * 1000, "audio/amr")
    api.media["big"] = (b"v" * 5000, "audio/amr")
    async with api_client(api) as (client, _):
        assert await client.media_get("small", max_bytes=4096, timeout=5) == b"v" * 1000
        with pytest.raises(MediaError) as refused:
            await client.media_get("big", max_bytes=4096, timeout=5)
    assert refused.value.too_large
