"""DELETE /api/v1/me (issue 35): a write key erases its own space, only after confirming with the
code the first call answered (good once, for that key); a read key cannot; other spaces stay; the
key itself is gone afterwards. The admin route erases a named person. The MCP tool erases only
with its explicit argument. On both backends."""

from __future__ import annotations

from tests.bot.mcp_clients import call, http_session


async def _remember(api, key: str, text: str) -> None:
    status, _, _ = await api.call("POST", "/api/v1/memories", key, json={"content": text})
    assert status == 201


async def test_delete_me_shows_a_code_then_erases_the_key_s_space_and_nothing_else(api):
    alice, bob = api.key("u_alice"), api.key("u_bob")
    await _remember(api, alice, "my locker code is QUOKKAMARBLE7731")
    await _remember(api, bob, "my bike is called MANGOFJORD9902")
    reader = api.key("u_alice", scope="read")
    status, body, _ = await api.call("DELETE", "/api/v1/me", reader)
    assert status == 403

    status, body, _ = await api.call("DELETE", "/api/v1/me", alice)
    assert status == 409 and body["error"]["code"] == "confirmation_required"
    assert body["erase"]["facts"] == 1 and body["erase"]["spaces"] == ["u_alice"]
    code = body["confirm"]
    status, _, _ = await api.call("DELETE", "/api/v1/me?confirm=WRONGCODE", alice)
    assert status == 409
    status, body, _ = await api.call("DELETE", f"/api/v1/me?confirm={code}", bob)   # another key's code
    assert status == 409
    status, body, _ = await api.call("GET", "/api/v1/memories", alice)
    assert status == 200 and body["total"] == 1     # nothing erased yet (the wrong code used up nothing)
    # The first (wrong) try did not consume the code: it is still good once.
    status, body, _ = await api.call("DELETE", f"/api/v1/me?confirm={code.lower()}", alice)
    assert status == 200 and body["erased"]["facts"] == 1 and body["erased"]["done"]
    status, _, _ = await api.call("GET", "/api/v1/memories", alice)
    assert status == 401                             # the space's keys went with it
    status, body, _ = await api.call("GET", "/api/v1/memories", bob)
    assert status == 200 and [m["text"] for m in body["memories"]] == ["my bike is called MANGOFJORD9902"]


async def test_the_admin_route_erases_a_named_space(api):
    bob = api.key("u_bob")
    await _remember(api, bob, "my bike is called MANGOFJORD9902")
    admin = api.key(None, scope="admin")
    status, plan, _ = await api.call("GET", "/api/v1/admin/erase?space=u_bob", admin)
    assert status == 200 and plan["facts"] == 1 and not plan["done"]
    status, _, _ = await api.call("GET", "/api/v1/admin/erase?space=public", admin)
    assert status == 400
    status, done, _ = await api.call("POST", "/api/v1/admin/erase", admin, json={"space": "u_bob"})
    assert status == 200 and done["done"] and done["facts"] == 1
    status, _, _ = await api.call("GET", "/api/v1/admin/erase?space=u_bob", admin)
    assert status == 400                             # no such space any more


async def test_the_mcp_tool_erases_only_with_its_explicit_argument(api):
    key = api.key("u_carol")
    await _remember(api, key, "my cat is called PELICANBRIM2290")
    async with http_session(api.app.extras["api"].url + "/mcp", key) as s:
        err, shown = await call(s, "erase_everything", {})
        assert not err and shown["status"] == "not erased" and shown["would_erase"]["facts"] == 1
        err, shown = await call(s, "erase_everything", {"confirm": "yes"})
        assert not err and shown["status"] == "not erased"
        err, found = await call(s, "search", {"query": "cat"})
        assert "PELICANBRIM2290" in str(found)
        err, done = await call(s, "erase_everything", {"confirm": "erase everything"})
        assert not err and done["status"] == "erased" and done["erased"]["facts"] == 1
    status, _, _ = await api.call("GET", "/api/v1/memories", key)
    assert status == 401
