"""[channels.telegram] proxy (issue 27): where the Bot API cannot be reached directly (mainland
China), python-telegram-bot's both HTTP clients (sending and long polling) go through an HTTP or
SOCKS5 proxy. The fake proxy on 127.0.0.1 reaches the fake Bot API at an address that refuses
the adapter when it connects directly."""

from __future__ import annotations

import asyncio

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.config import load_settings
from bot.errors import ChannelError
from bot.message import Message, Reply
from tests.fakes.ports import free_port
from tests.fakes.proxy import FakeProxy
from tests.fakes.telegram_api import FakeTelegram


@pytest.mark.parametrize("scheme", ["http", "socks5"])
async def test_the_bot_receives_and_answers_through_a_proxy_only(scheme):
    blocked = free_port()                   # the Bot API as this machine sees it: refused
    async with FakeTelegram() as tg, FakeProxy() as proxy:
        proxy.routes[("127.0.0.1", blocked)] = ("127.0.0.1", int(tg.base_url.split(":")[2].split("/")[0]))
        base = f"http://127.0.0.1:{blocked}/bot"
        direct = TelegramAdapter(tg.token, base_url=base, network_retries=0, request_timeout=5)
        with pytest.raises(ChannelError, match="cannot reach the Bot API"):
            await direct.start(lambda msg: asyncio.sleep(0))
        got: asyncio.Queue[Message] = asyncio.Queue()

        async def inbound(msg: Message) -> None:
            await got.put(msg)

        adapter = TelegramAdapter(tg.token, base_url=base, proxy=proxy.url(scheme), poll_timeout=1, request_timeout=5)
        await adapter.start(inbound)
        try:
            tg.inject_message(42, "hello through the wall")
            msg = await asyncio.wait_for(got.get(), 30)
            assert msg.text == "hello through the wall"
            await adapter.send(Reply(channel="telegram", chat_id=msg.chat_id, text="heard you"))
            assert "heard you" in tg.sent_texts()
        finally:
            await adapter.stop()
        # Every connection went through the proxy, in its own protocol, to the blocked address.
        assert proxy.requests and all(f"127.0.0.1:{blocked}" in r for r in proxy.requests)
        assert all(r.startswith("SOCKS5 ") == (scheme == "socks5") for r in proxy.requests), proxy.requests


def test_the_proxy_setting_takes_http_and_socks5_and_refuses_anything_else(tmp_path):
    config = tmp_path / "memgate.toml"
    for good in ("socks5://127.0.0.1:1080", "http://user:pw@proxy.example:3128", ""):
        config.write_text(f'[channels.telegram]\nproxy = "{good}"\n')
        assert load_settings(config, env={}).channels.telegram.proxy == good
    from bot.errors import ConfigError

    for bad in ("127.0.0.1:1080", "ftp://host:21", "socks5://host"):
        config.write_text(f'[channels.telegram]\nproxy = "{bad}"\n')
        with pytest.raises(ConfigError, match="proxy"):
            load_settings(config, env={})
