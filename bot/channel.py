"""The Channel protocol every adapter implements, and the callback it hands messages to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from bot.message import Message, Reply

# The gateway's entry point: an adapter awaits it for every inbound message. It returns quickly
# (the message is queued, not answered); replies come back through Channel.send.
InboundHandler = Callable[[Message], Awaitable[None]]


@runtime_checkable
class Channel(Protocol):
    """A messaging platform seen from the gateway.

    Lifecycle: `start(inbound)` begins receiving (long poll, webhook server, stdin) and returns
    once running; `stop()` stops receiving and waits for in-flight sends.
    """

    name: str

    async def start(self, inbound: InboundHandler) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply) -> None:
        """Deliver a reply, split and formatted for the platform. Raises ChannelError on a final failure."""
        ...

    def typing(self, message: Message) -> AbstractAsyncContextManager[None]:
        """Show 'typing...' in the message's chat while the agent works (a no-op where unsupported)."""
        ...
