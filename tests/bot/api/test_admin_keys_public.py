"""What the dashboard's admin page does through the API: add a shared (public) memory, and create,
list and revoke API keys. Only an admin key may; a key is shown once, at creation, never again."""

from __future__ import annotations


async def test_only_an_admin_adds_a_public_memory(api):
    admin, alice = api.key(scope="admin"), api.key("u_alice")
    body = {"content": "The office wifi is guest-net", "tags": ["office"]}
    assert (await api.call("POST", "/api/v1/admin/public/memories", alice, json=body))[0] == 403
    status, m, _ = await api.call("POST", "/api/v1/admin/public/memories", admin, json=body)
    assert status == 201 and m["text"] == "The office wifi is guest-net" and set(m["tags"]) == {"public", "office"}
    _, listed, _ = await api.call("GET", "/api/v1/admin/public/memories", admin)
    assert [x["id"] for x in listed["memories"]] == [m["id"]]
    # A public memory is recalled for everyone, and it is not in anyone's own space.
    hits = await api.app.engine.search("office wifi", ["u_alice", api.app.access.PUBLIC_SPACE])
    assert m["id"] in [h.id for h in hits]
    assert (await api.call("GET", f"/api/v1/memories/{m['id']}", alice))[0] == 404
    for bad in ({"content": ""}, {"content": "x", "tags": "office"}, {"content": "x", "space_id": "u_bob"}, {}):
        status, err, _ = await api.call("POST", "/api/v1/admin/public/memories", admin, json=bad)
        assert status == 400 and err["error"]["code"] == "bad_request", bad


async def test_keys_are_created_shown_once_listed_and_revoked(api):
    admin, alice = api.key(scope="admin"), api.key("u_alice")
    body = {"scope": "read", "space_id": "u_alice", "name": "phone", "expires_s": 86400}
    assert (await api.call("POST", "/api/v1/admin/keys", alice, json=body))[0] == 403
    status, made, _ = await api.call("POST", "/api/v1/admin/keys", admin, json=body)
    assert status == 201 and made["key"].startswith("mg_") and made["record"]["prefix"] == made["key"][:10]
    new = made["key"]
    assert (await api.call("GET", "/api/v1/memories", new))[0] == 200
    assert (await api.call("POST", "/api/v1/memories", new, json={"content": "x"}))[0] == 403  # read scope
    # The list never carries a key, only prefixes.
    _, listed, _ = await api.call("GET", "/api/v1/admin/keys", admin)
    assert new not in str(listed) and made["record"]["prefix"] in [k["prefix"] for k in listed["keys"]]
    assert next(k for k in listed["keys"] if k["prefix"] == made["record"]["prefix"])["name"] == "phone"
    status, rec, _ = await api.call("POST", "/api/v1/admin/keys/revoke", admin, json={"prefix": made["record"]["prefix"]})
    assert status == 200 and rec["revoked_at"]
    assert (await api.call("GET", "/api/v1/memories", new))[0] == 401
    assert (await api.call("POST", "/api/v1/admin/keys/revoke", admin, json={"prefix": made["record"]["prefix"]}))[0] == 404
    for bad in ({"scope": "god", "space_id": "u_alice"}, {"scope": "read"},
                {"scope": "read", "space_id": "u_alice", "expires_s": -1}):
        assert (await api.call("POST", "/api/v1/admin/keys", admin, json=bad))[0] == 400, bad


async def test_public_edit_and_forget_through_the_running_gateway_as_the_cli_does(tmp_path, embedder):
    """`memgate public add|edit|forget` while the gateway runs (issue 24): RemoteOperator, the CLI's
    own client, on the admin routes; a private memory's id is "not a public memory", never edited."""
    import asyncio

    from bot.operator.gateway_client import GatewayClient
    from bot.operator.remote import RemoteOperator
    from tests.bot.api.conftest import serve

    async with serve(tmp_path, embedder) as api:
        op = RemoteOperator(GatewayClient(api.app.extras["api"].url, api.key(scope="admin")))
        alice = api.key("u_alice")
        _, private, _ = await api.call("POST", "/api/v1/memories", alice, json={"content": "my locker code is 4512"})
        first = await asyncio.to_thread(op.public_add, "Lunch is at noon")
        edited = await asyncio.to_thread(op.public_edit, first, "Lunch is at one")
        assert edited and edited != first
        listed = await asyncio.to_thread(op.list, "public", ("fact", "chunk"), 50)
        assert [(m.id, m.text) for m in listed] == [(edited, "Lunch is at one")]
        assert await asyncio.to_thread(op.public_edit, private["id"], "hacked") is None
        assert await asyncio.to_thread(op.public_forget, private["id"]) is False
        assert (await api.call("GET", f"/api/v1/memories/{private['id']}", alice))[1]["text"] == "my locker code is 4512"
        assert await asyncio.to_thread(op.public_forget, edited) is True
        assert await asyncio.to_thread(op.list, "public", ("fact", "chunk"), 50) == []
