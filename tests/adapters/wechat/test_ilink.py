"""The WeChat iLink channel against a strict fake server: login, receive, send, typing, expiry, load."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.wechat.ilink import inbound
from adapters.wechat.ilink import protocol as proto
from bot.channel import Channel
from adapters.wechat.ilink.login import login
from adapters.wechat.ilink.state import CONTEXT_TOKENS_FILE, CURSOR_FILE, credentials_path, load_credentials
from adapters.wechat.ilink.adapter import WechatIlinkAdapter
from bot.errors import ChannelError
from bot.message import Document, Kind, Media, Message, Reply
from tests.fakes.ilink import FakeIlink, TypingCall, echo_load

ALICE = "alice@im.wechat"
BOB = "bob@im.wechat"


class Inbox:
    """An inbound handler that records what the adapter hands the gateway."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._changed = asyncio.Event()

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)
        self._changed.set()

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.messages]

    async def wait(self, n: int, timeout: float = 5.0) -> list[Message]:
        async with asyncio.timeout(timeout):
            while len(self.messages) < n:
                self._changed.clear()
                await self._changed.wait()
        return self.messages


@pytest.fixture
async def fake() -> AsyncIterator[FakeIlink]:
    async with FakeIlink(longpoll_ms=150) as server:
        yield server


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def make_adapter(data_dir: Path, **kwargs: object) -> WechatIlinkAdapter:
    options: dict[str, object] = {
        "backoff_base": 0.01,
        "credentials_check_interval": 0.05,
        "typing_interval": 0.05,
    }
    options.update(kwargs)
    return WechatIlinkAdapter(data_dir, **options)  # type: ignore[arg-type]


async def quick_login(fake: FakeIlink, data_dir: Path, *, out=lambda _: None, timeout: float = 10, **kw: object):
    """The real login flow against the fake, polling fast."""
    return await login(fake.base_url, data_dir, out=out, poll_interval=0.01, timeout=timeout, **kw)


def reply(user: str, text: str) -> Reply:
    return Reply(channel="wechat", chat_id=user, text=text)


def clean(fake: FakeIlink) -> None:
    assert fake.header_errors == []
    assert fake.protocol_errors == []


# -- protocol, pure ------------------------------------------------------------------------------


def test_client_version_is_encoded_as_0x00MMNNPP() -> None:
    assert proto.client_version_number("2.4.8") == 0x00020408
    assert proto.client_version_number("1.0.11") == 65547
    assert proto.client_version_number("3") == 0x00030000


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_uin_round_trips(value: int) -> None:
    assert proto.decode_uin(proto.encode_uin(value)) == value


@given(st.integers(min_value=-(2**40), max_value=200), st.floats(min_value=0.001, max_value=5), st.floats(min_value=1, max_value=60))
def test_backoff_doubles_and_is_capped(attempt: int, base: float, cap: float) -> None:
    delay = proto.backoff_delay(attempt, base, cap)
    assert 0 < delay <= cap
    if attempt > 1 and delay < cap:
        assert delay == pytest.approx(2 * proto.backoff_delay(attempt - 1, base, cap))


def test_backoff_default_sequence() -> None:
    assert [proto.backoff_delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
        ["msgs", "ret", "errcode", "item_list", "type", "text_item", "text", "voice_item", "from_user_id",
         "message_id", "create_time_ms", "get_updates_buf", "longpolling_timeout_ms", "context_token"]
    ), inner, max_size=6),
    max_leaves=30,
)


@given(_JSON)
def test_parsers_never_raise_on_junk(payload: object) -> None:
    batch = inbound.parse_updates(payload)
    assert isinstance(batch.cursor, str)
    proto.parse_qr_status(payload)
    proto.parse_qrcode(payload)


def test_uint64_message_ids_survive() -> None:
    raw = {"msgs": [{"from_user_id": ALICE, "message_id": 2**63 + 5, "item_list": [{"type": 1, "text_item": {"text": "hi"}}]}]}
    assert inbound.parse_updates(raw).messages[0].message_id == str(2**63 + 5)


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_any_create_time_gives_a_timestamp(ms: int) -> None:
    raw = {"msgs": [{"from_user_id": ALICE, "create_time_ms": ms, "item_list": []}]}
    (wire,) = inbound.parse_updates(raw).messages
    now = datetime(2026, 1, 1, tzinfo=UTC)
    message = inbound.to_message(wire, "wechat", now)
    assert message.timestamp.tzinfo is not None
    assert message.kind == Kind.OTHER


def test_adapter_is_a_channel(data_dir: Path) -> None:
    assert isinstance(make_adapter(data_dir), Channel)


# -- login ---------------------------------------------------------------------------------------


async def test_login_walks_statuses_saves_qr_and_credentials_0600(fake: FakeIlink, data_dir: Path) -> None:
    lines: list[str] = []
    creds = await quick_login(fake, data_dir, out=lines.append)

    assert creds.bot_token == fake.token
    assert creds.ilink_bot_id == fake.bot_id
    assert creds.baseurl == fake.base_url
    assert creds.ilink_user_id == fake.owner_id
    path = credentials_path(data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_credentials(data_dir) == creds
    assert set(json.loads(path.read_text())) == {"bot_token", "ilink_bot_id", "baseurl", "ilink_user_id"}
    images = sorted(p.name for p in data_dir.glob("wechat_login_qr.*"))
    assert images in (["wechat_login_qr.png"], ["wechat_login_qr.svg"])
    if images == ["wechat_login_qr.svg"]:
        assert any("SVG" in line for line in lines)  # the user is told why it is not a PNG
        assert "<svg" in (data_dir / images[0]).read_text()
    assert len(fake.qr_polls) == 3  # wait, scaned, confirmed
    assert any("Scanned" in line for line in lines)
    assert any("█" in line or "▀" in line or "▄" in line for line in lines)  # the terminal QR
    assert fake.qr_local_tokens == [[]]
    assert all(fake.token not in line for line in lines)
    clean(fake)


async def test_login_refreshes_expired_code_follows_redirect_and_asks_for_verify_code(data_dir: Path) -> None:
    statuses = ["wait", "expired", "scaned", "scaned_but_redirect", "need_verifycode", "confirmed"]
    asked: list[str] = []

    async def ask(prompt: str) -> str:
        asked.append(prompt)
        return "0000" if len(asked) == 1 else "4321"

    async with FakeIlink(qr_statuses=statuses, verify_code="4321") as fake:
        creds = await quick_login(fake, data_dir, ask_code=ask)
        assert creds.bot_token == fake.token
        assert len(fake.qr_local_tokens) == 2  # a new code after "expired"
        hosts = [host for _, _, host in fake.qr_polls]
        redirect_at = statuses.index("scaned_but_redirect")
        assert all(h.startswith("127.0.0.1") for h in hosts[: redirect_at + 1])
        assert all(h.startswith("localhost") for h in hosts[redirect_at + 1 :])
        assert len(asked) == 2  # the wrong code was asked again
        assert [code for _, code, _ in fake.qr_polls][-2:] == ["0000", "4321"]
        clean(fake)


async def test_login_sends_the_previous_token_and_keeps_it_when_already_bound(data_dir: Path) -> None:
    async with FakeIlink(qr_statuses=["scaned", "binded_redirect"]) as fake:
        fake.write_credentials(data_dir)
        before = credentials_path(data_dir).read_text()
        creds = await quick_login(fake, data_dir)
        assert fake.qr_local_tokens == [[fake.token]]
        assert creds.bot_token == fake.token
        assert credentials_path(data_dir).read_text() == before


async def test_login_gives_up_after_three_expired_codes(data_dir: Path) -> None:
    async with FakeIlink(qr_statuses=["expired"] * 5) as fake:
        with pytest.raises(ChannelError, match="expired"):
            await quick_login(fake, data_dir)
        assert len(fake.qr_local_tokens) == 3
        assert not credentials_path(data_dir).exists()


async def test_login_times_out_with_a_clear_error(data_dir: Path) -> None:
    async with FakeIlink(qr_statuses=["wait"] * 10_000) as fake:
        with pytest.raises(ChannelError, match="timed out"):
            await quick_login(fake, data_dir, timeout=0.3)


# -- headers ---------------------------------------------------------------------------------------


async def test_every_call_carries_every_header(fake: FakeIlink, data_dir: Path) -> None:
    await quick_login(fake, data_dir)
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        fake.inject_text(ALICE, "hello")
        (message,) = await inbox.wait(1)
        async with adapter.typing(message):
            await adapter.send(reply(ALICE, "hi"))
    finally:
        await adapter.stop()
    for endpoint in ("get_bot_qrcode", "get_qrcode_status", "getupdates", "sendmessage", "getconfig", "sendtyping",
                     "msg/notifystart", "msg/notifystop"):
        assert fake.calls[endpoint] >= 1, endpoint
    assert len(fake.uins) == sum(fake.calls[e] for e in fake.calls if e != "get_qrcode_status")
    clean(fake)


async def test_the_fake_refuses_a_missing_or_wrong_header(fake: FakeIlink) -> None:
    def headers() -> dict[str, str]:
        return proto.post_headers(fake.token, "bot", proto.DEFAULT_CLIENT_VERSION, proto.random_uin())

    body = json.dumps(proto.getupdates_body("", "1.0")).encode()
    cases = {
        "X-WECHAT-UIN": {k: v for k, v in headers().items() if k != "X-WECHAT-UIN"},
        "Authorization": {**headers(), "Authorization": "Bearer not-a-token"},
        "AuthorizationType": {**headers(), "AuthorizationType": "token"},
        "iLink-App-Id": {**headers(), "iLink-App-Id": "other"},
        "iLink-App-ClientVersion": {**headers(), "iLink-App-ClientVersion": "2.4.8"},
        "Content-Type": {**headers(), "Content-Type": "text/plain"},
    }
    async with aiohttp.ClientSession() as http:
        for name, broken in cases.items():
            async with http.post(f"{fake.base_url}/ilink/bot/getupdates", data=body, headers=broken) as resp:
                assert resp.status == 401, name
            assert fake.header_errors[-1].startswith(f"getupdates: {name} "), fake.header_errors[-1]
        same = headers()
        for _ in range(2):
            async with http.post(f"{fake.base_url}/ilink/bot/getupdates", data=body, headers=same) as resp:
                pass
        assert resp.status == 401
        assert "repeats" in fake.header_errors[-1]
    assert len(fake.header_errors) == len(cases) + 1


# -- receiving -----------------------------------------------------------------------------------


async def test_items_become_messages(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        sent = fake.inject_text(ALICE, "hello")
        fake.inject_voice(ALICE, "spoken words")
        fake.inject_voice(ALICE, None)
        fake.inject(ALICE, [{"type": 1, "text_item": {"text": "in a group"}}], group_id="g1@chatroom")
        fake.inject(fake.bot_id, [{"type": 1, "text_item": {"text": "my own echo"}}], message_type=2)
        fake.inject_image(BOB)
        fake.inject_file(BOB)
        fake.inject_video(BOB)
        messages = await inbox.wait(6)
    finally:
        await adapter.stop()
    assert [(m.kind, m.text) for m in messages] == [
        (Kind.TEXT, "hello"),
        (Kind.VOICE, "spoken words"),
        (Kind.VOICE, ""),
        (Kind.PHOTO, ""),
        (Kind.FILE, ""),
        (Kind.VIDEO, ""),
    ]
    # WeChat's transcript is the voice note's (used as it is); an image without a download
    # descriptor is named but has nothing to fetch.
    assert messages[1].media == (Media(Kind.VOICE, "", duration=2.3, transcript="spoken words"),)
    assert [m.kind for m in messages[3].media] == [Kind.PHOTO] and messages[3].media[0].ref
    assert messages[4].media[0].name == "report.pdf" and messages[4].media[0].size == 1024
    first = messages[0]
    assert (first.channel, first.chat_id, first.sender_id, first.is_group) == ("wechat", ALICE, ALICE, False)
    assert first.message_id == str(sent["message_id"])
    assert first.timestamp == datetime.fromtimestamp(sent["create_time_ms"] / 1000, tz=UTC)
    assert adapter.stats["received"] == 6
    assert adapter.poll_timeout_ms == fake.longpoll_ms  # the advertised long-poll timeout is honoured
    clean(fake)


async def test_conversation_across_a_restart_has_no_duplicate_and_no_gap(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.batch_limit = 2
    first, second = Inbox(), Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(first)
    for i in range(5):
        fake.inject_text(ALICE, f"before {i}")
    await first.wait(5)
    await adapter.send(reply(ALICE, "answer one"))
    await adapter.stop()
    assert json.loads((data_dir / CURSOR_FILE).read_text())["get_updates_buf"]

    for i in range(3):  # written while the bot was down
        fake.inject_text(ALICE, f"while down {i}")
    adapter = make_adapter(data_dir)
    await adapter.start(second)
    try:
        fake.inject_text(ALICE, "after")
        await second.wait(4)
        await adapter.send(reply(ALICE, "answer two"))
        await fake.wait_for(lambda: fake.unacknowledged() == [], what="every message acknowledged")
    finally:
        await adapter.stop()

    assert first.texts == [f"before {i}" for i in range(5)]
    assert second.texts == ["while down 0", "while down 1", "while down 2", "after"]
    assert fake.duplicates() == []
    assert fake.texts_to(ALICE) == ["answer one", "answer two"]
    clean(fake)


async def test_the_fake_detects_a_client_that_forgets_its_cursor(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    fake.inject_text(ALICE, "once")
    await inbox.wait(1)
    await fake.wait_for(lambda: fake.acked_seq == 1, what="the cursor sent back")
    await adapter.stop()
    (data_dir / CURSOR_FILE).unlink()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        await inbox.wait(2)
    finally:
        await adapter.stop()
    assert inbox.texts == ["once", "once"]
    assert fake.duplicates() == [1]


async def test_poll_errors_back_off_and_recover(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.fail_http_next("getupdates", 500, times=3)
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        fake.inject_text(ALICE, "still arrives")
        await inbox.wait(1)
    finally:
        await adapter.stop()
    assert inbox.texts == ["still arrives"]
    assert adapter.stats["poll_errors"] == 3


async def test_start_without_a_login_says_how_to_log_in(data_dir: Path) -> None:
    with pytest.raises(ChannelError, match="memgate wechat login"):
        await make_adapter(data_dir).start(Inbox())


# -- sending ---------------------------------------------------------------------------------------


async def test_context_token_is_echoed_and_survives_a_restart(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    fake.inject_text(ALICE, "one")
    fake.inject_text(BOB, "hi")
    fake.inject_text(ALICE, "two")
    await inbox.wait(3)
    await adapter.send(reply(ALICE, "reply"))
    await adapter.stop()
    assert fake.sent[-1].context_token == fake.context_token(ALICE)
    assert stat.S_IMODE((data_dir / CONTEXT_TOKENS_FILE).stat().st_mode) == 0o600

    adapter = make_adapter(data_dir)  # a fresh process: nothing new from Alice or Bob
    await adapter.start(Inbox())
    try:
        await adapter.send(reply(ALICE, "after restart"))
        await adapter.send(Reply(channel="wechat", chat_id="ignored", recipient_id=BOB, text="to bob"))
    finally:
        await adapter.stop()
    assert [(m.to_user_id, m.context_token) for m in fake.sent[-2:]] == [
        (ALICE, fake.context_token(ALICE)),
        (BOB, fake.context_token(BOB)),
    ]
    assert len({m.client_id for m in fake.sent}) == len(fake.sent)
    clean(fake)


async def test_long_replies_are_split_at_4000_characters(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "tell me a lot")
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    words = [f"word{i}" for i in range(1000)]  # 7,889 characters
    try:
        await inbox.wait(1)
        await adapter.send(reply(ALICE, " ".join(words)))
    finally:
        await adapter.stop()
    parts = fake.texts_to(ALICE)
    assert len(parts) == 2
    assert all(len(p) <= 4000 for p in parts)
    assert " ".join(parts).split() == words
    assert adapter.stats["sent"] == 2
    clean(fake)


async def test_markdown_is_sent_as_plain_text(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        await inbox.wait(1)
        await adapter.send(reply(ALICE, "## Plan\n- **one** [docs](https://x.org)\n```\ncode\n```"))
        await adapter.send(Reply(channel="wechat", chat_id=ALICE, text="", document=Document("a.jsonl", b"{}")))
    finally:
        await adapter.stop()
    assert fake.texts_to(ALICE) == [
        "Plan\n• one docs (https://x.org)\ncode",
        "[The file a.jsonl cannot be sent over WeChat.]",
    ]


async def test_not_delivered_is_counted_and_raised(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        await inbox.wait(1)
        fake.fail_send_next(-2)
        with pytest.raises(ChannelError, match="ret -2"):
            await adapter.send(reply(ALICE, "lost?"))
        fake.expire_context(ALICE)  # the 24 h window closes: the real token stops working too
        with pytest.raises(ChannelError, match="ret -2"):
            await adapter.send(reply(ALICE, "lost again?"))
        with pytest.raises(ChannelError):
            await adapter.send(reply("stranger@im.wechat", "never wrote to us"))
    finally:
        await adapter.stop()
    assert adapter.stats["send_failed"] == 3
    assert adapter.stats["sent"] == 0
    assert fake.sent == []


class Owner:
    """What the owner is told through on_trouble."""

    def __init__(self) -> None:
        self.told: list[str] = []

    async def __call__(self, text: str) -> None:
        self.told.append(text)


async def test_not_delivered_is_told_to_the_owner_once(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    owner = Owner()
    inbox = Inbox()
    adapter = make_adapter(data_dir, on_trouble=owner)
    await adapter.start(inbox)
    try:
        await inbox.wait(1)
        for _ in range(3):
            fake.fail_send_next(-2)
            with pytest.raises(ChannelError, match="ret -2"):
                await adapter.send(reply(ALICE, "lost?"))
    finally:
        await adapter.stop()
    [notice] = owner.told  # throttled: one notice, not one per refused reply
    assert "ret -2" in notice and ALICE in notice and "24-hour" in notice


async def test_other_refusals_are_told_to_the_owner(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    owner = Owner()
    inbox = Inbox()
    adapter = make_adapter(data_dir, on_trouble=owner)
    await adapter.start(inbox)
    try:
        await inbox.wait(1)
        fake.fail_send_next(-5)
        with pytest.raises(ChannelError, match="ret=-5"):
            await adapter.send(reply(ALICE, "refused"))
    finally:
        await adapter.stop()
    assert len(owner.told) == 1 and "ret=-5" in owner.told[0]


async def test_a_notice_refused_on_this_channel_raises_no_second_notice(fake: FakeIlink, data_dir: Path) -> None:
    # The owner is on WeChat too, outside the window: telling them fails with -2 as well.
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    told: list[str] = []
    inbox = Inbox()
    adapter = make_adapter(data_dir)

    async def owner_on_wechat(text: str) -> None:
        told.append(text)
        fake.fail_send_next(-5)  # another kind of refusal: not throttled, only the guard stops it
        with pytest.raises(ChannelError):
            await adapter.send(reply(BOB, text))

    adapter.on_trouble = owner_on_wechat
    await adapter.start(inbox)
    try:
        await inbox.wait(1)
        fake.fail_send_next(-2)
        with pytest.raises(ChannelError):
            await adapter.send(reply(ALICE, "lost?"))
    finally:
        await adapter.stop()
    assert len(told) == 1


class Waits:
    """An injected sleep: records what the adapter waits, then yields briefly."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await asyncio.sleep(0.001)


@pytest.mark.parametrize(("status", "header", "expected"), [(429, "7", 7.0), (503, "3", 3.0), (429, "86400", 60.0)])
async def test_throttled_send_waits_what_the_server_asks(fake: FakeIlink, data_dir: Path, status, header, expected) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    waits = Waits()
    inbox = Inbox()
    adapter = make_adapter(data_dir, sleep=waits)
    await adapter.start(inbox)
    try:
        await inbox.wait(1)
        fake.fail_http_next("sendmessage", status, retry_after=header)
        await adapter.send(reply(ALICE, "after the pause"))
    finally:
        await adapter.stop()
    assert expected in waits.seconds
    assert fake.texts_to(ALICE) == ["after the pause"]


async def test_throttled_poll_waits_what_the_server_asks(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.fail_http_next("getupdates", 503, retry_after="9")
    waits = Waits()
    inbox = Inbox()
    adapter = make_adapter(data_dir, sleep=waits)
    await adapter.start(inbox)
    try:
        fake.inject_text(ALICE, "still arrives")
        await inbox.wait(1)
    finally:
        await adapter.stop()
    assert waits.seconds[0] == 9.0
    assert inbox.texts == ["still arrives"]


# -- session expiry --------------------------------------------------------------------------------


async def test_session_expiry_stops_polling_and_a_new_login_resumes_it(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    told: list[str] = []

    async def on_expired(text: str) -> None:
        told.append(text)

    inbox = Inbox()
    adapter = make_adapter(data_dir, on_trouble=on_expired)
    await adapter.start(inbox)
    try:
        fake.inject_text(ALICE, "before")
        await inbox.wait(1)
        assert adapter.is_up()  # /healthz shows the channel receiving
        fake.expire_session()
        await fake.wait_for(lambda: len(told) == 1, what="on_trouble")
        assert not adapter.is_up()  # ...and no longer once the login is gone
        polls = fake.getupdates_calls
        # A window in which a retry loop would poll dozens of times (checks every 0.05 s).
        await asyncio.sleep(0.6)
        assert fake.getupdates_calls == polls
        assert adapter.session_expired
        assert "memgate wechat login" in told[0]

        fake.inject_text(ALICE, "during the outage")
        await quick_login(fake, data_dir)
        fake.inject_text(ALICE, "after")
        await inbox.wait(3)
        assert adapter.is_up()
    finally:
        await adapter.stop()
    assert not adapter.is_up()
    assert inbox.texts == ["before", "during the outage", "after"]
    assert len(told) == 1
    assert not adapter.session_expired
    clean(fake)


# -- typing ----------------------------------------------------------------------------------------


async def test_typing_starts_and_stops_around_the_work(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "think")
    inbox = Inbox()
    adapter = make_adapter(data_dir, typing_interval=3600)
    await adapter.start(inbox)
    try:
        (message,) = await inbox.wait(1)
        async with adapter.typing(message):
            assert fake.typing == [TypingCall(ALICE, 1)]
        async with adapter.typing(message):
            pass
    finally:
        await adapter.stop()
    assert fake.typing == [TypingCall(ALICE, 1), TypingCall(ALICE, 2)] * 2
    assert fake.calls["getconfig"] == 1  # the ticket is cached
    clean(fake)


async def test_typing_is_kept_alive_while_the_agent_works(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "think long")
    inbox = Inbox()
    adapter = make_adapter(data_dir, typing_interval=0.01)
    await adapter.start(inbox)
    try:
        (message,) = await inbox.wait(1)
        async with adapter.typing(message):
            await fake.wait_for(lambda: len(fake.typing) >= 3, what="typing keep-alive")
    finally:
        await adapter.stop()
    assert fake.typing[-1] == TypingCall(ALICE, 2)
    assert all(call.status == 1 for call in fake.typing[:-1])


async def test_typing_failures_are_never_fatal(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    fake.inject_text(ALICE, "q")
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        (message,) = await inbox.wait(1)
        fake.fail_http_next("getconfig", 500)
        async with adapter.typing(message):
            await adapter.send(reply(ALICE, "answer anyway"))
    finally:
        await adapter.stop()
    assert fake.typing == []
    assert fake.texts_to(ALICE) == ["answer anyway"]


# -- load ------------------------------------------------------------------------------------------


async def test_twenty_users_times_ten_messages_lose_nothing_and_keep_order(fake: FakeIlink, data_dir: Path) -> None:
    fake.write_credentials(data_dir)
    adapter = make_adapter(data_dir)
    result = await echo_load(fake, adapter, users=20, per_user=10, timeout=30)
    assert result.failures == []
    assert result.delivered == result.expected
    assert fake.duplicates() == []
    assert adapter.stats["received"] == 200
    assert adapter.stats["sent"] == 200
    clean(fake)


def test_credentials_file_is_created_private_even_with_a_loose_umask(tmp_path: Path) -> None:
    from adapters.wechat.ilink.state import save_credentials

    old = os.umask(0)
    try:
        save_credentials(tmp_path, proto.Credentials("SECRET-TOKEN", "b", "https://h", "u"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(credentials_path(tmp_path).stat().st_mode) == 0o600
    assert "SECRET-TOKEN" not in repr(load_credentials(tmp_path))


async def test_no_token_reaches_the_logs(fake: FakeIlink, data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    lines: list[str] = []
    await quick_login(fake, data_dir, out=lines.append)
    inbox = Inbox()
    adapter = make_adapter(data_dir)
    await adapter.start(inbox)
    try:
        fake.inject_text(ALICE, "hello")
        (message,) = await inbox.wait(1)
        async with adapter.typing(message):
            await adapter.send(reply(ALICE, "hi"))
        fake.fail_send_next(-2)
        with pytest.raises(ChannelError):
            await adapter.send(reply(ALICE, "lost"))
    finally:
        await adapter.stop()
    secrets = [fake.token, fake.context_token(ALICE) or "?"]
    for text in [r.getMessage() for r in caplog.records] + lines:
        assert not any(secret in text for secret in secrets), text


async def test_an_answer_past_the_cap_is_abandoned_as_it_arrives() -> None:
    """A server (or whoever sits on a plain-http line to it) that answers without end: the call
    fails with one clear line once the cap is passed, not after reading what was sent."""
    from aiohttp import web

    from adapters.wechat.ilink.client import TransportError, post

    sent = 0
    chunk = b"[" + b"0," * 32767 + b"0"   # 64 KiB of a JSON array that never closes

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            while sent < 64 * 1024 * 1024:
                await resp.write(chunk)
                sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    app = web.Application()
    app.router.add_post("/ilink/bot/getupdates", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(TransportError, match="more than 1048576 bytes"):
                await post(http, f"http://127.0.0.1:{port}", "token", app_id="bot", client_version="1.0.0",
                           endpoint="ilink/bot/getupdates", body={}, timeout=120, max_bytes=1024 * 1024)
    finally:
        await runner.cleanup()
    assert sent < 16 * 1024 * 1024     # the client stopped reading near the cap, not at the end
