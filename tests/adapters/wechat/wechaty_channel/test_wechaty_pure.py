"""The wechaty adapter's pure parts and its behaviour without the SDK (run in every environment)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.wechat import wechaty_adapter as ww
from adapters.wechat import wechaty_sdk as sdk
from bot.channel import Channel
from bot.errors import ChannelError, ConfigError
from bot.message import Kind, Message, Reply

ROOT = Path(__file__).resolve().parents[4]
NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def test_importing_the_module_does_not_import_the_sdk() -> None:
    code = "import sys, adapters.wechat.wechaty_adapter; print(sorted(m for m in sys.modules if m.startswith('wechaty')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_start_without_the_sdk_raises_a_channel_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import wechaty` raise ImportError, as when the extra is absent.
    monkeypatch.setitem(sys.modules, "wechaty", None)
    with pytest.raises(ChannelError, match=r"memgate\[wechaty\]"):
        sdk.load_wechaty_sdk()


@pytest.mark.parametrize(("package", "bad"), [("pyee", "13.0.1"), ("urllib3", "2.2.3")])
def test_a_too_new_pin_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch, package: str, bad: str) -> None:
    good = {"wechaty": "0.10.7", "pyee": "11.1.1", "urllib3": "1.26.20"}
    monkeypatch.setattr(sdk.metadata, "version", lambda name: bad if name == package else good[name])
    with pytest.raises(ChannelError, match=f"{package} {bad}"):
        sdk.load_wechaty_sdk()


async def test_adapter_start_maps_a_missing_sdk_to_channel_error() -> None:
    def missing() -> sdk.WechatySdk:
        raise ChannelError(sdk.INSTALL_HINT)

    adapter = ww.WechatyAdapter("127.0.0.1:9", "t", sdk_loader=missing)
    assert isinstance(adapter, Channel)
    with pytest.raises(ChannelError, match="wechaty"):
        await adapter.start(_ignore)
    with pytest.raises(ChannelError, match="not started"):
        await adapter.send(_reply("hi"))


async def _ignore(message: object) -> None:
    del message


def _reply(text: str) -> Reply:
    return Reply(channel="wechaty", chat_id="wxid_alice", text=text)


@pytest.mark.parametrize(
    ("end_point", "expected"),
    [("127.0.0.1:8788", ("127.0.0.1", 8788)), ("http://puppet.local:30001", ("puppet.local", 30001))],
)
def test_parse_end_point(end_point: str, expected: tuple[str, int]) -> None:
    assert ww.parse_end_point(end_point) == expected


@pytest.mark.parametrize("end_point", ["", "127.0.0.1", "https://h:1", "h:notaport", ":8080"])
def test_bad_end_points_are_a_config_error(end_point: str) -> None:
    with pytest.raises(ConfigError):
        ww.WechatyAdapter(end_point, "t")


def test_kind_for_maps_media_and_defaults_to_other() -> None:
    assert ww.kind_for("MESSAGE_TYPE_TEXT") is Kind.TEXT
    assert ww.kind_for("MESSAGE_TYPE_IMAGE") is Kind.PHOTO
    assert ww.kind_for("MESSAGE_TYPE_AUDIO") is Kind.VOICE
    assert ww.kind_for("MESSAGE_TYPE_RED_ENVELOPE") is Kind.OTHER


@given(st.integers(min_value=1, max_value=2_145_888_000))
def test_message_time_reads_seconds_and_milliseconds_alike(seconds: int) -> None:
    as_seconds = ww.message_time(seconds, NOW)
    assert as_seconds == datetime.fromtimestamp(seconds, UTC)
    if seconds * 1000 > 2_145_888_000:
        assert ww.message_time(seconds * 1000, NOW) == as_seconds


def test_message_time_without_a_timestamp_is_now() -> None:
    assert ww.message_time(0, NOW) is NOW


_names = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc")), min_size=1, max_size=12)
_words = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="@"), max_size=40)


@given(_names, _words, st.sampled_from(["\u2005", " "]))
def test_strip_mention_removes_the_bots_mention_only(name: str, rest: str, sep: str) -> None:
    assert ww.strip_mention(f"@{name}{sep}{rest}", name) == rest.strip()
    assert ww.strip_mention(rest, name) == rest.strip()


def test_strip_mention_keeps_other_peoples_mentions() -> None:
    assert ww.strip_mention("@Alice\u2005@memgate\u2005hello", "memgate") == "@Alice\u2005hello"


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6000))
def test_reply_parts_fit_and_keep_every_letter(text: str) -> None:
    parts = ww.reply_parts(text)
    assert all(0 < len(part) <= ww.TEXT_LIMIT for part in parts)
    # Splitting drops only whitespace (a cut inside a code fence may repeat the fence's language)
    # and markdown_to_plain keeps every letter and digit: the input's letters survive, in order.
    sent = iter("".join(parts))
    assert all(c in sent for c in text if c.isalnum())


def test_reply_parts_are_plain_text() -> None:
    assert ww.reply_parts("**Hello** _there_, see [docs](https://x.y)") == ["Hello there, see docs (https://x.y)"]


async def test_typing_is_a_no_op() -> None:
    adapter = ww.WechatyAdapter("127.0.0.1:9", "t")
    async with adapter.typing(Message("wechaty", "c", "s", "t", NOW)):
        pass
