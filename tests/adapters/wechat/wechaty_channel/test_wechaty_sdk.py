"""The real wechaty SDK (0.10.7) driving WechatyAdapter against a fake puppet service on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import UTC, datetime
from importlib import metadata

import pytest

from bot.errors import ChannelError
from bot.message import Kind, Reply

try:
    metadata.version("wechaty")
except metadata.PackageNotFoundError:
    pytest.skip("wechaty SDK not installed (run .ci/wechaty.sh)", allow_module_level=True)

from adapters.wechat.wechaty_adapter import TEXT_LIMIT, WechatyAdapter  # noqa: E402

BOT, ALICE, BOB, ROOM = "wxid_bot", "wxid_alice", "wxid_bob", "room1@chatroom"


def _reply(chat_id: str, text: str) -> Reply:
    return Reply(channel="wechaty", chat_id=chat_id, text=text)


async def test_start_runs_the_sdk_handshake_and_opens_the_event_stream(puppet, connect) -> None:
    service, _ = puppet
    await connect()
    await asyncio.wait_for(service.wait_stream(), timeout=10)
    assert service.calls[:3] == ["Stop", "Start", "Event"]


async def test_a_direct_text_reaches_the_gateway_as_a_message(puppet, connect) -> None:
    service, _ = puppet
    _, inbox = await connect()
    service.login(BOT)
    message_id = service.push_message(ALICE, "hello there", to_id=BOT, timestamp=1_767_258_000)

    message = await inbox.next()

    assert message.channel == "wechaty"
    assert (message.chat_id, message.sender_id, message.sender_name) == (ALICE, ALICE, "Alice")
    assert message.text == "hello there"
    assert message.kind is Kind.TEXT
    assert message.message_id == message_id
    assert not message.is_group and not message.mentions_bot
    assert message.timestamp == datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


async def test_the_bots_own_messages_and_repeated_events_are_dropped(puppet, connect) -> None:
    service, _ = puppet
    adapter, inbox = await connect()
    service.login(BOT)
    service.push_message(BOT, "my own echo", to_id=ALICE)
    first = service.push_message(ALICE, "once", to_id=BOT)
    service.announce(first)  # puppets sometimes repeat a message event
    service.push_message(ALICE, "twice", to_id=BOT)

    assert (await inbox.next()).text in {"once", "twice"}
    await inbox.next()
    await adapter.stop()  # waits for every event handler in flight

    assert sorted(m.text for m in inbox.all) == ["once", "twice"]


async def test_a_room_mention_is_a_group_message_addressed_to_the_bot(puppet, connect) -> None:
    service, _ = puppet
    _, inbox = await connect()
    service.login(BOT)
    service.push_message(BOB, "@memgate\u2005what is new?", room_id=ROOM, mention_ids=(BOT,))

    message = await inbox.next()

    assert (message.chat_id, message.sender_id, message.sender_name) == (ROOM, BOB, "Bob")
    assert message.is_group and message.mentions_bot and message.addressed_to_bot
    assert message.text == "what is new?"


async def test_room_chatter_without_a_mention_is_not_addressed_to_the_bot(puppet, connect) -> None:
    service, _ = puppet
    _, inbox = await connect()
    service.login(BOT)
    service.push_message(BOB, "@Alice\u2005lunch?", room_id=ROOM, mention_ids=(ALICE,))

    message = await inbox.next()

    assert message.is_group and not message.mentions_bot and not message.addressed_to_bot
    assert message.text == "@Alice\u2005lunch?"


async def test_a_photo_arrives_as_a_photo_without_text(puppet, connect) -> None:
    service, _ = puppet
    _, inbox = await connect()
    service.login(BOT)
    service.push_message(ALICE, "<img cdnurl='...'/>", to_id=BOT, kind="image")

    message = await inbox.next()

    assert (message.kind, message.text) == (Kind.PHOTO, "")


async def test_send_says_plain_text_to_the_conversation(puppet, connect) -> None:
    service, _ = puppet
    adapter, _ = await connect()

    await adapter.send(_reply(ALICE, "**Done.** See `memgate --help`."))
    await adapter.send(_reply(ROOM, "# Notes\n- one"))

    sent = await asyncio.wait_for(service.wait_sent(2), timeout=10)
    assert [(s.conversation_id, s.text) for s in sent] == [
        (ALICE, "Done. See memgate --help."),
        (ROOM, "Notes\n• one"),
    ]


async def test_a_long_reply_is_split_into_messages_that_fit(puppet, connect) -> None:
    service, _ = puppet
    adapter, _ = await connect()
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(12)]  # ~9,000 characters

    await adapter.send(_reply(ALICE, "\n\n".join(paragraphs)))

    sent = service.sent
    assert len(sent) >= 5
    assert all(s.conversation_id == ALICE and len(s.text) <= TEXT_LIMIT for s in sent)
    joined = " ".join(s.text for s in sent)
    assert joined.split() == "\n\n".join(paragraphs).split()


async def test_a_refused_send_is_a_channel_error(puppet, connect) -> None:
    service, _ = puppet
    adapter, _ = await connect()
    service.refuse_sends = True

    with pytest.raises(ChannelError, match=ALICE):
        await adapter.send(_reply(ALICE, "hi"))


async def test_an_unreachable_puppet_service_fails_start_with_a_channel_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter = WechatyAdapter(f"127.0.0.1:{port}", "t")

    with pytest.raises(ChannelError, match="cannot reach"):
        await adapter.start(lambda message: asyncio.sleep(0))


async def test_the_token_never_reaches_the_logs(puppet, connect, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    service, _ = puppet
    adapter, inbox = await connect(token="sekret-puppet-token")
    service.login(BOT)
    service.push_message(ALICE, "hi", to_id=BOT)
    await inbox.next()
    await adapter.stop()

    # The SDK warns "there are endpoint<...> and token<...>" on start: it must arrive masked.
    assert any("token<***>" in r.getMessage() for r in caplog.records)
    assert not any("sekret-puppet-token" in r.getMessage() for r in caplog.records)


async def test_stop_leaves_no_adapter_task_behind(puppet, connect) -> None:
    service, _ = puppet
    adapter, inbox = await connect()
    service.login(BOT)
    service.push_message(ALICE, "hi", to_id=BOT)
    await inbox.next()

    await adapter.stop()

    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not [t.get_name() for t in leftovers if t.get_name().startswith("wechaty")]
    with pytest.raises(ChannelError):
        await adapter.send(_reply(ALICE, "after stop"))


async def test_a_new_adapter_after_a_stop_still_receives_and_sends(puppet, connect) -> None:
    # The SDK caches Contact objects class-wide, bound to the first puppet: a restart in the same
    # process must not send through the stopped one.
    service, _ = puppet
    first, inbox = await connect()
    service.login(BOT)
    service.push_message(ALICE, "before", to_id=BOT)
    await inbox.next()
    await first.send(_reply(ALICE, "one"))
    await first.stop()

    second, inbox = await connect()
    service.login(BOT)
    service.push_message(ALICE, "after", to_id=BOT)
    assert (await inbox.next()).text == "after"
    await second.send(_reply(ALICE, "two"))

    assert [s.text for s in await asyncio.wait_for(service.wait_sent(2), timeout=10)] == ["one", "two"]
