"""Chat through the running gateway (issue 24): the routes `memgate chat` uses when it attaches to
a gateway instead of opening the database (bot.operator.chat_client is the other end).

    GET  /api/v1/admin/chat/events?user=NAME   NDJSON, one event a line, while the client listens:
         {"type": "attached", "chat", "as", "bot_name", "commands"} first, then {"type": "typing", "on", "message_id"},
         {"type": "draft", "reply_to", "from", "text", "dropped"?} while a reply is written (the reply so far
         is the text had up to character `from`, then `text`: bot.api.attached), {"type": "reply", "text",
         "reply_to", "document"?} (the finished reply: it replaces the draft), {"type": "ping"} every PING_S,
         and {"type": "closing"} when the gateway stops.
    POST /api/v1/admin/chat/messages  {"user", "text", "message_id"} -> 202 once the line is in
         the gateway's inbox (durable), 503 when the store cannot record it (the client keeps the
         line and sends it again, as the in-process terminal does).
    POST /api/v1/admin/chat/cancel  {"user"} -> {"cancelled": bool}: the terminal's Ctrl-C, the turn
         in flight stopped (what was said stays captured; no answer is sent).

The same two routes under /api/v1/chat take a space key with write scope instead (the key stands
for its person: its space, and public, as in any DM; `MEMGATE_API_KEY=... memgate chat`).

Admin scope: the local admin token (api.token, readable only by the account that runs the
gateway) speaks as any terminal user, exactly as whoever can open the data folder can run
`memgate chat --user NAME` without a gateway. The line is a console message of `NAME` in the
conversation `NAME@attached`, so the turn takes the gateway's normal path (inbox, queue, access,
agent, capture) and the person's memory space is the same as in the in-process chat.
"""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from bot.api.attached import AttachedTerminals, Listener, attached_chat
from bot.api.context import API_KEY, CLOCK, HOST, KEYS, STREAMS
from bot.api.errors import ApiError
from bot.api.params import body_json
from bot.errors import ChannelError, StoreError
from bot.message import Message

routes = web.RouteTableDef()
ADMIN = "/api/v1/admin/chat"   # the local admin token, as the terminal user ?user= / "user"
KEYED = "/api/v1/chat"         # a space key with write scope, as itself
PING_S = 15.0          # an idle stream still says it is alive (and finds a client that left)
LIVE_CHECK_S = 1.0     # a stream's key is checked again before an event at most this long after the last check
MAX_USER = 64
MAX_LINE = 20_000      # the agent cuts longer messages itself; this only bounds the request
MAX_MESSAGE_ID = 64


def _user(value: object) -> str:
    """A terminal user's name: what `memgate chat --user NAME` accepts, without control characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_USER:
        raise ApiError(400, "bad_request", f"user must be a name of 1 to {MAX_USER} characters")
    if any(unicodedata.category(ch)[0] == "C" for ch in value) or value != value.strip():
        raise ApiError(400, "bad_request", "user must not hold control characters or surrounding spaces")
    return value


@dataclass(frozen=True, slots=True)
class Speaker:
    """Who an attached terminal speaks as: the channel that carries it, its conversation, its sender."""

    chats: AttachedTerminals
    chat: str
    sender_id: str
    sender_name: str


def _speaker(request: web.Request, user: object) -> Speaker:
    """The admin token speaks as the terminal user `user`; a space key as itself (its space)."""
    host, rec = request.app[HOST], request[API_KEY]
    chats = host.chats if rec.scope == "admin" else host.key_chats
    if chats is None:
        raise ApiError(404, "not_found", "this server does not take chat (it serves the API only)")
    if rec.scope == "admin":
        name = _user(user)
        return Speaker(chats, attached_chat(name), name, name)
    if rec.scope != "write":
        raise ApiError(403, "forbidden", "chatting needs a write key (a read key only reads memories)")
    return Speaker(chats, attached_chat(rec.id), rec.id, rec.name or rec.prefix)


@routes.get(ADMIN + "/events")
@routes.get(KEYED + "/events")
async def events(request: web.Request) -> web.StreamResponse:
    who, rec = _speaker(request, request.query.get("user")), request[API_KEY]
    keys, slots = request.app[KEYS], request.app[STREAMS]
    closed = asyncio.Event()  # the key was revoked through this gateway: the stream ends at once
    if not slots.take(rec.id, closed.set):
        raise ApiError(429, "too_many_streams", f"this key holds {slots.per_key} event streams open already "
                       "([api] streams_per_key); close one first", {"Retry-After": str(int(PING_S))})
    try:
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8"})
        await resp.prepare(request)

        async def write(event: dict) -> None:
            await resp.write((json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8"))

        async with who.chats.listen(who.chat) as listener:
            host = request.app[HOST]
            await write({"type": "attached", "chat": who.chat, "as": who.sender_name, "bot_name": host.bot_name,
                         "commands": list(host.commands)})
            checked = time.monotonic()
            while not closed.is_set():
                event = await _next_event(listener, closed)
                if event is None or closed.is_set():
                    break
                # The key must still be live to hear what comes: one revoked elsewhere (the command
                # line on a shared database) ends its stream here, before a reply is written (drafts
                # come many a second: they are let through for LIVE_CHECK_S after a check).
                # "closing" carries nothing and comes while the gateway stops (its database may be
                # going): it is always written, so the terminal says why it ended.
                kind = event.get("type")
                if kind != "closing" and (kind != "draft" or time.monotonic() - checked > LIVE_CHECK_S):
                    if await asyncio.to_thread(keys.live, rec.id) is None:
                        break
                    checked = time.monotonic()
                try:
                    await write(event)
                except (ConnectionError, RuntimeError):
                    break  # the client left; what it missed was answered and captured all the same
        try:
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp
    finally:
        slots.give_back(rec.id, closed.set)


async def _next_event(listener: Listener, closed: asyncio.Event) -> dict | None:
    """The listener's next event, a ping after PING_S of quiet, or None once `closed` is set."""
    get, stop = asyncio.ensure_future(listener.get()), asyncio.ensure_future(closed.wait())
    try:
        done, _ = await asyncio.wait((get, stop), timeout=PING_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (get, stop):
            task.cancel()
    if get in done and not get.cancelled():
        return get.result()
    return None if stop in done else {"type": "ping"}


@routes.post(ADMIN + "/messages")
@routes.post(KEYED + "/messages")
async def message(request: web.Request) -> web.Response:
    body = await body_json(request)
    who = _speaker(request, body.get("user"))
    text, message_id = body.get("text"), body.get("message_id")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, "bad_request", "text must be a non-empty string")
    if len(text) > MAX_LINE:
        raise ApiError(413, "too_large", f"text is longer than {MAX_LINE} characters")
    if not isinstance(message_id, str) or not 0 < len(message_id) <= MAX_MESSAGE_ID:
        raise ApiError(400, "bad_request", f"message_id must be a string of 1 to {MAX_MESSAGE_ID} characters "
                       "(the same id sent again is the same message, answered once)")
    now: datetime = request.app[CLOCK]()
    msg = Message(channel=who.chats.name, chat_id=who.chat, sender_id=who.sender_id, sender_name=who.sender_name,
                  text=text, timestamp=now, message_id=message_id)
    try:
        await who.chats.hand_in(msg)
    except (StoreError, ChannelError) as exc:
        raise ApiError(503, "unavailable", f"the gateway could not record the message ({exc}); send it again",
                       {"Retry-After": "1"}) from None
    return web.json_response({"accepted": message_id, "chat": msg.chat_id}, status=202)


@routes.post(ADMIN + "/cancel")
@routes.post(KEYED + "/cancel")
async def cancel(request: web.Request) -> web.Response:
    """{"user"} (admin token) or {} (a key): stop the reply being written in that terminal's
    conversation (its Ctrl-C). What was said stays captured; no answer is sent for it."""
    body = await body_json(request)
    who, host = _speaker(request, body.get("user")), request.app[HOST]
    cancelled = await host.cancel(who.chats.name, who.chat) if host.cancel is not None else False
    return web.json_response({"cancelled": cancelled})


async def close_streams(app: web.Application) -> None:
    """on_shutdown: end the attached terminals' streams before the server waits for its handlers."""
    host = app[HOST]
    for chats in (host.chats, host.key_chats):
        if chats is not None:
            chats.close_listeners()
