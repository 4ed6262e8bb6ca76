"""`memgate chat`'s line to a running gateway (issue 24): one more client of its API, over the
admin routes in bot.api.routes_chat. `ChatLink` opens the event stream of a terminal user's
attached conversation, hands lines in (202 once they are in the gateway's inbox) and yields the
gateway's events: typing while the agent works, each reply as it is written and when it is
finished, the gateway closing.

A reply is shown as it is written: `draft` events carry its text so far (each says how much of
what came before stays, then what follows), with the secrets of the message it answers, and
anything that could still become a secret, held back (memory.redaction.redact_growing). The
`reply` event that follows is the finished reply, stored in the gateway's outbox first; it
replaces the draft.

Async (the terminal's line editor runs on an event loop); aiohttp only, no database, model or LLM
library.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import TracebackType

import aiohttp

from bot.errors import MemgateError, StoreError
from bot.operator.gateway_client import GatewayCallError, GatewayClient

ADMIN = "/api/v1/admin/chat"   # with the gateway's local admin token, as a terminal user
KEYED = "/api/v1/chat"         # with a space key (MEMGATE_API_KEY), as that key
STREAM_IDLE_S = 60.0   # the gateway pings every 15 s: a minute of silence is a gateway gone


class LineRefused(MemgateError):
    """The gateway will not take this line as it is (too long, ...): the terminal shows why."""


class ChatLink:
    """An attached conversation: `async with ChatLink(client, user) as link`, then `send` lines and
    read `events()`. `pending` holds the ids of lines sent and not answered yet."""

    def __init__(self, client: GatewayClient, user: str, key: str | None = None) -> None:
        """As the terminal user `user` with the gateway's local admin token, or, given a space `key`,
        as that key (its space; `user` is then only what the prompt shows until the gateway says)."""
        self.client, self.user, self.key = client, user, key
        self._routes, self._who = (KEYED, {}) if key else (ADMIN, {"user": user})
        self.bot_name = "memgate"
        self.chat = ""
        self.pending: set[str] = set()
        self.commands: list[str] = []        # the gateway's commands, for Tab
        self._in_flight: str | None = None   # the line whose turn is running (its typing is on)
        self.answered = asyncio.Event()   # set whenever nothing is pending
        self.answered.set()
        self._http: aiohttp.ClientSession | None = None
        self._stream: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> ChatLink:
        self._http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {self.key or self.client.token}"},
                                           timeout=aiohttp.ClientTimeout(total=None, connect=10,
                                                                         sock_read=STREAM_IDLE_S))
        try:
            self._stream = await self._http.get(self.client.url + self._routes + "/events", params=self._who)
            if self._stream.status != 200:
                raise GatewayCallError(await _message(self._stream), self._stream.status)
            first = await self._next()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            await self._close()
            raise GatewayCallError(f"the running gateway at {self.client.url} did not answer ({exc})") from None
        except BaseException:
            await self._close()
            raise
        if not first or first.get("type") != "attached":
            await self._close()
            raise GatewayCallError(f"the gateway at {self.client.url} did not attach this terminal")
        self.chat, self.bot_name = first["chat"], first.get("bot_name") or self.bot_name
        self.user = first.get("as") or self.user
        self.commands = [str(c) for c in first.get("commands") or ()]
        return self

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._stream is not None:
            self._stream.release()
        if self._http is not None:
            await self._http.close()

    async def _next(self) -> dict | None:
        assert self._stream is not None
        line = await self._stream.content.readline()
        return json.loads(line) if line else None

    async def events(self) -> AsyncIterator[dict]:
        """The gateway's events until it closes the stream (pings are left out)."""
        while True:
            try:
                event = await self._next()
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                return
            if event is None:
                return
            if event.get("type") == "ping":
                continue
            if event.get("type") == "reply":
                self._answered(event.get("reply_to"))
            elif event.get("type") == "typing":
                self._in_flight = event.get("message_id") if event.get("on") else None
            yield event

    def _answered(self, message_id: object) -> None:
        self.pending.discard(message_id)  # type: ignore[arg-type]
        if not self.pending:
            self.answered.set()

    async def cancel(self) -> bool:
        """Stop the reply being written (Ctrl-C); True when a turn was in flight. That line gets no
        answer, so it is no longer waited for."""
        assert self._http is not None
        try:
            async with self._http.post(self.client.url + self._routes + "/cancel", json=self._who) as resp:
                cancelled = resp.status == 200 and bool((await resp.json(content_type=None)).get("cancelled"))
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return False
        if cancelled and self._in_flight is not None:
            self._answered(self._in_flight)
        return cancelled

    async def send(self, text: str, message_id: str) -> None:
        """Hand a line in; returns once the gateway has it in its inbox. StoreError when it could not
        record it now (the terminal keeps the line and sends it again: the same id is answered once),
        LineRefused when it never will."""
        assert self._http is not None
        self.pending.add(message_id)
        self.answered.clear()
        try:
            async with self._http.post(self.client.url + self._routes + "/messages",
                                       json={**self._who, "text": text, "message_id": message_id}) as resp:
                if resp.status == 202:
                    return
                message = await _message(resp)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise StoreError(f"the gateway at {self.client.url} did not take the line ({exc})") from None
        if resp.status in (429, 503):
            raise StoreError(message)
        self.pending.discard(message_id)
        if not self.pending:
            self.answered.set()
        raise LineRefused(message)


async def _message(resp: aiohttp.ClientResponse) -> str:
    try:
        return (await resp.json(content_type=None))["error"]["message"]
    except Exception:
        return f"the gateway answered HTTP {resp.status}"
