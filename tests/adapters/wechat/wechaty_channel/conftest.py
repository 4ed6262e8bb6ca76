"""Fixtures for the wechaty channel tests: a fake puppet service and an adapter connected to it.

These tests run in their own virtualenv (.ci/wechaty.sh), because the wechaty SDK pins pyee and
urllib3. In the main environment the SDK is absent: the pure tests still run, the SDK tests skip.
No __init__.py here on purpose: a package named `wechaty` would shadow the SDK.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from bot.message import Message
from tests.fakes.clock import FakeClock


@pytest.fixture(scope="session", autouse=True)
def _wechaty_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The SDK makes its cache folder ($CACHE_DIR, else ./.wechaty) on import: keep it in tmp."""
    previous = os.environ.get("CACHE_DIR")
    os.environ["CACHE_DIR"] = str(tmp_path_factory.mktemp("wechaty-cache"))
    yield
    if previous is None:
        os.environ.pop("CACHE_DIR", None)
    else:
        os.environ["CACHE_DIR"] = previous


@pytest.fixture
async def puppet() -> AsyncIterator[tuple[object, str]]:
    """(FakePuppetService, "127.0.0.1:port"), served for the test's duration."""
    from tests.fakes.puppet_grpc import FakePuppetServer

    async with FakePuppetServer() as (service, end_point):
        service.add_contact("wxid_bot", "memgate")
        service.add_contact("wxid_alice", "Alice")
        service.add_contact("wxid_bob", "Bob")
        service.add_room("room1@chatroom", "friends")
        yield service, end_point


class Inbox:
    """Collects what the adapter hands to the gateway."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.all: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.all.append(message)
        self.queue.put_nowait(message)

    async def next(self) -> Message:
        """The next inbound message; the timeout only guards against a hang."""
        return await asyncio.wait_for(self.queue.get(), timeout=10)


@pytest.fixture
async def connect(puppet: tuple[object, str]) -> AsyncIterator[Callable[..., Awaitable[tuple[object, Inbox]]]]:
    """connect(token=...) -> (started WechatyAdapter, Inbox); every adapter is stopped afterwards."""
    from adapters.wechat.wechaty_adapter import WechatyAdapter

    _, end_point = puppet
    started: list[WechatyAdapter] = []

    async def make(token: str = "puppet-token-123", **kwargs: object) -> tuple[WechatyAdapter, Inbox]:
        adapter = WechatyAdapter(end_point, token, clock=FakeClock().now, **kwargs)
        inbox = Inbox()
        await adapter.start(inbox)
        started.append(adapter)
        return adapter, inbox

    yield make
    for adapter in started:
        await adapter.stop()
