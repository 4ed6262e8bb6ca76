"""Reminders over the HTTP API (/api/v1/reminders) and the MCP tools (remind, reminders), on both
backends: each key reaches its own space's reminders only, a read key cannot set or cancel, an
unclear WHEN comes back as the question to ask, and the admin sees them per person."""

from __future__ import annotations

from bot.reminders.store import Address
from tests.bot.mcp_clients import call, http_session


async def test_the_api_sets_lists_and_cancels_in_the_keys_space_only(api):
    alice, bob, alice_read = api.key("u_alice"), api.key("u_bob"), api.key("u_alice", "read")
    status, body, _ = await api.call("POST", "/api/v1/reminders", alice, json={"when": "in 10 minutes", "what": "tea"})
    assert status == 422 and "write to the bot once" in body["error"]["message"]   # no chat of hers known yet
    await api.app.extras["reminders"].store.note_dm("u_alice", Address("console", "alice", None, "alice"))
    status, body, _ = await api.call("POST", "/api/v1/reminders", alice, json={"when": "in 10 minutes", "what": "tea"})
    assert status == 201 and body["what"] == "tea" and body["channel"] == "console"
    assert body["confirmation"].startswith("OK, I'll remind you on ") and body["zone"] == "UTC"
    rid = body["id"]
    status, body, _ = await api.call("POST", "/api/v1/reminders", alice, json={"when": "明天", "what": "交报告"})
    assert status == 422 and body["error"]["code"] == "no_time" and "几点" in body["error"]["message"]
    assert (await api.call("POST", "/api/v1/reminders", alice_read, json={"when": "in 1 hour", "what": "x"}))[0] == 403
    status, body, _ = await api.call("GET", "/api/v1/reminders", alice_read)
    assert status == 200 and [r["id"] for r in body["reminders"]] == [rid]
    status, body, _ = await api.call("GET", "/api/v1/reminders", bob)
    assert status == 200 and body["reminders"] == []
    assert (await api.call("DELETE", f"/api/v1/reminders/{rid}", bob))[0] == 404          # not bob's
    status, body, _ = await api.call("GET", "/api/v1/admin/reminders", api.key(scope="admin"))
    assert status == 200 and [(p["space_id"], [r["id"] for r in p["reminders"]]) for p in body["people"]] == [("u_alice", [rid])]
    status, body, _ = await api.call("DELETE", f"/api/v1/reminders/{rid}", alice)
    assert status == 200 and body["status"] == "cancelled"
    assert (await api.call("GET", "/api/v1/reminders", alice))[1]["reminders"] == []


async def test_mcp_tools_set_list_and_cancel_in_the_keys_space_only(api):
    await api.app.extras["reminders"].store.note_dm("u_alice", Address("telegram", "100", None, "100"))
    url = api.app.extras["api"].url + "/mcp"
    async with http_session(url, api.key("u_alice")) as s:
        err, got = await call(s, "remind", {"when": "every monday 8:00", "what": "water the plants"})
        assert not err and got["status"] == "set" and got["reminder"]["every"] == "week"
        rid = got["reminder"]["id"]
        err, got = await call(s, "remind", {"when": "at 9", "what": "stretch"})
        assert not err and got["status"] == "not_set" and "Did you mean" in got["ask_the_user"]
        err, listed = await call(s, "reminders", {})
        assert not err and [r["what"] for r in listed["reminders"]] == ["water the plants"]
    async with http_session(url, api.key("u_bob")) as s:
        err, listed = await call(s, "reminders", {})
        assert not err and listed["reminders"] == []
        err, text = await call(s, "reminders", {"cancel": rid})
        assert err and "no active reminder" in text
    async with http_session(url, api.key("u_alice", "read")) as s:
        err, text = await call(s, "remind", {"when": "in 1 hour", "what": "x"})
        assert err and "can only read" in text
    async with http_session(url, api.key("u_alice")) as s:
        err, got = await call(s, "reminders", {"cancel": rid})
        assert not err and got["status"] == "cancelled"
