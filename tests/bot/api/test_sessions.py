"""The dashboard's login: a key becomes an HttpOnly, SameSite=Strict session cookie with an
idle expiry; the cookie authenticates reads, writes need the CSRF token from login, logout and
revoking the key end the session; header keys keep working without any of this."""

from __future__ import annotations

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.api.sessions import COOKIE, CSRF_HEADER, Session, Sessions, csrf_ok


async def _login(api, key: str) -> tuple[aiohttp.ClientSession, dict, str]:
    """A fresh browser-like client (its own cookie jar) logged in with `key`."""
    base = api.app.extras["api"].url
    http = aiohttp.ClientSession(base_url=base, cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with http.post("/api/v1/session", json={"key": key}, headers={"Origin": base}) as resp:
        assert resp.status == 201
        raw = resp.headers.getall("Set-Cookie")
        return http, await resp.json(), raw[0]


async def test_login_sets_a_strict_httponly_cookie_and_answers_csrf(api):
    key = api.key("u_alice")
    http, who, raw = await _login(api, key)
    async with http:
        assert raw.startswith(f"{COOKIE}=") and "HttpOnly" in raw and "SameSite=Strict" in raw and "Path=/" in raw
        assert key not in raw  # the cookie is a session token, never the key
        assert who["logged_in"] and who["space_id"] == "u_alice" and who["scope"] == "write" and len(who["csrf"]) >= 20
        async with http.get("/api/v1/session") as resp:
            me = await resp.json()
        assert me["logged_in"] and me["csrf"] == who["csrf"]


async def test_cookie_reads_and_writes_need_the_csrf_token(api):
    http, who, _ = await _login(api, api.key("u_alice"))
    async with http:
        async with http.post("/api/v1/memories", json={"content": "I like green tea"}) as resp:
            assert resp.status == 403 and (await resp.json())["error"]["code"] == "csrf"
        async with http.post("/api/v1/memories", json={"content": "I like green tea"},
                             headers={CSRF_HEADER: "not-the-token"}) as resp:
            assert resp.status == 403
        async with http.post("/api/v1/memories", json={"content": "I like green tea"},
                             headers={CSRF_HEADER: who["csrf"]}) as resp:
            assert resp.status == 201
            mid = (await resp.json())["id"]
        async with http.get("/api/v1/memories") as resp:
            assert resp.status == 200 and [m["id"] for m in (await resp.json())["memories"]] == [mid]
        for method in ("PATCH", "DELETE"):
            async with http.request(method, f"/api/v1/memories/{mid}", json={"pinned": True}) as resp:
                assert resp.status == 403, method


async def test_bad_keys_do_not_log_in(api):
    key, rec = api.keys.create("write", "u_alice")
    api.keys.revoke(rec.prefix)
    base = api.app.extras["api"].url
    async with aiohttp.ClientSession(base_url=base, headers={"Origin": base}) as http:
        for body in ({"key": "mg_nope"}, {"key": key}, {"key": 5}, {}):
            async with http.post("/api/v1/session", json=body) as resp:
                assert resp.status == 401 and "Set-Cookie" not in resp.headers, body
        async with http.post("/api/v1/session", data=b"not json", headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400
        # Not logged in is an answer, not an error (the dashboard asks on every load).
        async with http.get("/api/v1/session") as resp:
            assert resp.status == 200 and await resp.json() == {"logged_in": False}
        async with http.get("/api/v1/memories", headers={"Cookie": f"{COOKIE}=forged"}) as resp:
            assert resp.status == 401


async def test_logout_needs_csrf_and_ends_the_session(api):
    http, who, _ = await _login(api, api.key("u_alice"))
    async with http:
        async with http.delete("/api/v1/session") as resp:
            assert resp.status == 403
        async with http.delete("/api/v1/session", headers={CSRF_HEADER: who["csrf"]}) as resp:
            assert resp.status == 200
        async with http.get("/api/v1/memories") as resp:
            assert resp.status == 401


async def test_revoking_the_key_ends_its_sessions(api):
    key, rec = api.keys.create("read", "u_alice")
    http, _, _ = await _login(api, key)
    async with http:
        async with http.get("/api/v1/memories") as resp:
            assert resp.status == 200
        api.keys.revoke(rec.prefix)
        async with http.get("/api/v1/memories") as resp:
            assert resp.status == 401


async def test_admin_session_reaches_admin_routes_only(api):
    http, who, _ = await _login(api, api.key(scope="admin"))
    async with http:
        assert who["scope"] == "admin" and who["space_id"] is None
        async with http.get("/api/v1/admin/users") as resp:
            assert resp.status == 200
        async with http.get("/api/v1/memories") as resp:
            assert resp.status == 403


async def test_header_keys_need_no_csrf(api):
    key = api.key("u_alice")
    status, _, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "an API client's memory"})
    assert status == 201


def test_sessions_expire_when_idle_and_touch_restarts_the_timer():
    now = [0.0]
    s = Sessions(60, clock=lambda: now[0])
    token, _ = s.open("k1")
    now[0] = 59
    assert s.touch(token) is not None
    now[0] = 118  # 59 s after the last touch, not 118 after login
    assert s.touch(token).key_id == "k1"
    now[0] = 179
    assert s.touch(token) is None
    assert s.touch(token) is None  # gone for good, even if time went back
    assert s.touch(None) is None and s.touch("") is None


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=64))
def test_csrf_only_the_exact_token_passes(presented):
    s = Session("k", "the-real-token-123456", 0.0)
    assert csrf_ok(s, presented) is (presented == "the-real-token-123456")
    assert csrf_ok(s, "the-real-token-123456")
