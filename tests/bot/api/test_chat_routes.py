"""The chat routes attached terminals use (issue 24 item 2), on a real App with its API: admin keys
only, each terminal user's replies on their own stream and nobody else's, the line taken through
the gateway's inbox as the console person `NAME` (the memory space of `memgate chat --user NAME`),
bad input a 400. (The terminal itself: tests/bot/cli/test_chat_attach.py.)"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from bot.api.context import HOST, STREAMS
from bot.message import Reply
from tests.bot.api.conftest import serve

EVENTS, MESSAGES = "/api/v1/admin/chat/events", "/api/v1/admin/chat/messages"
KEY_EVENTS, KEY_MESSAGES = "/api/v1/chat/events", "/api/v1/chat/messages"


async def _next(stream) -> dict:
    while True:
        event = json.loads(await asyncio.wait_for(stream.content.readline(), 60))
        if event["type"] != "ping":
            return event


async def test_each_attached_terminal_gets_its_own_replies_through_the_gateway(tmp_path, embedder):
    async with serve(tmp_path, embedder) as api:
        admin, space_key = api.key(scope="admin"), api.key("u_ann", scope="write")
        auth = {"Authorization": f"Bearer {admin}"}
        # A space key (anyone's phone app) cannot speak as a terminal user.
        for method, path in (("GET", EVENTS + "?user=ann"), ("POST", MESSAGES)):
            status, err, _ = await api.call(method, path, space_key, json={"user": "ann", "text": "hi", "message_id": "x"})
            assert status == 403 and err["error"]["code"] == "forbidden"
        bad = [{"user": "", "text": "hi", "message_id": "1"}, {"user": "ann\x1b[2J", "text": "hi", "message_id": "1"},
               {"user": "ann", "text": " ", "message_id": "1"}, {"user": "ann", "text": "hi"}]
        for body in bad:
            assert (await api.call("POST", MESSAGES, admin, json=body))[0] == 400, body

        async with api.http.get(EVENTS, params={"user": "ann"}, headers=auth) as ann, \
                api.http.get(EVENTS, params={"user": "bob"}, headers=auth) as bob:
            assert ann.status == 200 and bob.status == 200
            first = await _next(ann)
            assert first["chat"] == "ann@attached" and (await _next(bob))["chat"] == "bob@attached"
            assert "help" in first["commands"] and "whoami" in first["commands"]   # what Tab completes
            # Ctrl-C with nothing in flight cancels nothing.
            assert (await api.call("POST", "/api/v1/admin/chat/cancel", admin, json={"user": "ann"}))[1] == \
                {"cancelled": False}
            status, body, _ = await api.call("POST", MESSAGES, admin, json={"user": "ann", "text": "/help", "message_id": "a1"})
            assert status == 202 and body == {"accepted": "a1", "chat": "ann@attached"}
            status, _, _ = await api.call("POST", MESSAGES, admin, json={"user": "bob", "text": "/help", "message_id": "b1"})
            assert status == 202
            ann_reply, bob_reply = await _next(ann), await _next(bob)
            # Each stream carries its own person's answer only (a /command: no LLM in this App).
            assert ann_reply["type"] == "reply" and ann_reply["reply_to"] == "a1" and "/quit" in ann_reply["text"]
            assert bob_reply["type"] == "reply" and bob_reply["reply_to"] == "b1"
        # The line was the console person's, in a conversation of its own, through the inbox.
        ann_id = await api.app.access.identity("console", "ann")
        bob_id = await api.app.access.identity("console", "bob")
        assert ann_id is not None and bob_id is not None and ann_id.space_id != bob_id.space_id
        rows = api.app.store.read(lambda c: c.execute(
            "SELECT conversation_key, status FROM inbox ORDER BY seq").fetchall())
        assert [r[0] for r in rows] == ["console:ann@attached", "console:bob@attached"]
        # Nobody listening: the route still takes the line (durable), the reply has nowhere to go.
        status, _, _ = await api.call("POST", MESSAGES, admin, json={"user": "ann", "text": "/help", "message_id": "a2"})
        assert status == 202
        await api.app.gateway.idle()


async def test_a_space_key_chats_in_its_own_space_and_a_read_or_revoked_key_cannot(tmp_path, embedder):
    """`MEMGATE_API_KEY=... memgate chat`: the key stands for its person (its space, as the memory routes)."""
    async with serve(tmp_path, embedder) as api:
        key, reader = api.key("u_kim", scope="write", name="kim's laptop"), api.key("u_kim", scope="read")
        auth = {"Authorization": f"Bearer {key}"}
        line = {"text": "/remember my locker is number 12", "message_id": "k1"}
        assert (await api.call("POST", KEY_MESSAGES, reader, json=line))[0] == 403
        assert (await api.call("POST", KEY_MESSAGES, api.key(scope="admin"), json=line))[0] == 403  # admin: /admin/chat
        async with api.http.get(KEY_EVENTS, headers=auth) as events:
            first = await _next(events)
            assert first["as"] == "kim's laptop" and first["chat"].endswith("@attached")
            assert (await api.call("POST", KEY_MESSAGES, key, json=line))[0] == 202
            reply = await _next(events)
            assert reply["type"] == "reply" and reply["reply_to"] == "k1"
        # Remembered in the key's space, nowhere else; the API's own view of that space finds it.
        status, page, _ = await api.call("GET", "/api/v1/memories", key)
        assert status == 200 and [m["text"] for m in page["memories"]] == ["my locker is number 12"]
        assert await api.app.access.identity("api", first["chat"].split("@")[0]) is None  # nothing stored about a key
        prefix = api.keys.verify(key).prefix
        api.keys.revoke(prefix)
        assert (await api.call("POST", KEY_MESSAGES, key, json={**line, "message_id": "k2"}))[0] == 401


async def test_a_stopping_gateway_tells_the_attached_terminals_and_ends_their_streams(tmp_path, embedder):
    """Without this the server, which stops first, waited its shutdown timeout (60 s) on each open stream."""
    async with aiohttp.ClientSession() as http:
        async with serve(tmp_path, embedder) as api:
            headers = {"Authorization": f"Bearer {api.key(scope='admin')}"}
            stream = await http.get(api.app.extras["api"].url + EVENTS, params={"user": "ann"}, headers=headers)
            assert (await _next(stream))["type"] == "attached"
        assert (await _next(stream))["type"] == "closing"
        assert await stream.content.readline() == b""
        stream.release()


async def test_a_key_holds_a_bounded_number_of_event_streams(tmp_path, embedder):
    """Issue 31: one write key held 150 streams (an open file each); now [api] streams_per_key."""
    async with serve(tmp_path, embedder, streams_per_key=2) as api:
        key, other = api.key("u_kim", scope="write"), api.key("u_lee", scope="write")
        auth = {"Authorization": f"Bearer {key}"}
        first = await api.http.get(KEY_EVENTS, headers=auth)
        second = await api.http.get(KEY_EVENTS, headers=auth)
        assert [(await _next(s))["type"] for s in (first, second)] == ["attached", "attached"]
        status, err, headers = await api.call("GET", KEY_EVENTS, key)
        assert status == 429 and err["error"]["code"] == "too_many_streams" and "streams_per_key" in err["error"]["message"]
        assert "Retry-After" in headers
        # Another key is not held back by this one; a closed stream gives its slot back.
        async with api.http.get(KEY_EVENTS, headers={"Authorization": f"Bearer {other}"}) as theirs:
            assert theirs.status == 200 and (await _next(theirs))["type"] == "attached"
        first.close()
        await _until(lambda: api.app.extras["api"].app[STREAMS].held(api.keys.verify(key).id) == 1)
        async with api.http.get(KEY_EVENTS, headers=auth) as again:
            assert again.status == 200 and (await _next(again))["type"] == "attached"
        second.close()


async def test_a_revoked_key_hears_nothing_more_on_its_open_stream(tmp_path, embedder):
    """Issue 31: a line sent just before the key was revoked was answered on its stream afterwards."""
    async with serve(tmp_path, embedder) as api:
        admin, key = api.key(scope="admin"), api.key("u_kim", scope="write")
        rec = api.keys.verify(key)
        chats = api.app.extras["api"].app[HOST].key_chats
        async with api.http.get(KEY_EVENTS, headers={"Authorization": f"Bearer {key}"}) as events:
            chat = (await _next(events))["chat"]
            # Revoked where this gateway cannot see it (the command line on a shared database):
            # the reply the outbox hands over next is not written; the stream ends instead.
            api.keys.revoke(rec.prefix)
            await chats.send(Reply(channel="api", chat_id=chat, text="your locker is number 12", reply_to="k1"))
            assert await asyncio.wait_for(events.content.readline(), 60) == b""
        # Revoked through this gateway's admin route: its streams end at once, not at the next event.
        key2 = api.key("u_kim", scope="write")
        async with api.http.get(KEY_EVENTS, headers={"Authorization": f"Bearer {key2}"}) as events:
            assert (await _next(events))["type"] == "attached"
            status, _, _ = await api.call("POST", "/api/v1/admin/keys/revoke", admin,
                                          json={"prefix": api.keys.verify(key2).prefix})
            assert status == 200
            assert await asyncio.wait_for(events.content.readline(), 60) == b""


async def _until(predicate, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)
