"""What the API answers before any route runs (issue 22, B7-B10 and the "Also" line), against the
real gateway App on a free loopback port over a real DuckDB file:

- B9: only configured host names are answered (DNS rebinding: `Host: evil.example` gets 421);
- B7: a login needs JSON and our own Origin; a write from another origin is refused;
- B8: logins are rate-limited per key and per client, and a key's logins evict only its own
  sessions (the admin's survives 10,000 logins with another key);
- B10: JSON nested at any depth is a 400 with the JSON error body on every route, never a 500;
- every API answer carries `Cache-Control: no-store`; the cookie is Secure behind a TLS proxy.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.api.context import SESSIONS
from bot.api.origins import HostPolicy, host_name
from bot.api.params import MAX_DEPTH, json_depth, loads_bounded
from bot.api.sessions import COOKIE, Sessions, SessionsFull
from tests.bot.api.conftest import Api, serve


def served(tmp_path, embedder, **api_kw):
    return serve(tmp_path, embedder, **api_kw)


def origin(api: Api) -> str:
    return api.app.extras["api"].url


async def login(api: Api, key: str, **headers: str) -> tuple[int, dict | str, aiohttp.ClientSession]:
    """A fresh browser-like client (own cookie jar) posting the dashboard's login."""
    http = aiohttp.ClientSession(base_url=origin(api), cookie_jar=aiohttp.CookieJar(unsafe=True))
    hdrs = {"Origin": origin(api), **headers}
    async with http.post("/api/v1/session", data=json.dumps({"key": key}),
                         headers={"Content-Type": "application/json", **hdrs}) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, body, http


# --- B9: Host ------------------------------------------------------------------------------

PATHS = ("/healthz", "/metrics", "/", "/static/app.js", "/api/v1/memories", "/api/v1/session", "/api/v1/admin/users")


async def test_other_host_names_are_not_answered(tmp_path, embedder):
    async with served(tmp_path, embedder) as api:
        port = origin(api).rsplit(":", 1)[1]
        key = api.key("u_alice")
        for path in PATHS:
            for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "localhost.evil"):
                status, body, headers = await api.call("GET", path, key, headers={"Host": host})
                assert status == 421, (path, host, status)
                assert body["error"]["code"] == "misdirected" and headers["Cache-Control"] == "no-store"
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "localhost."):
                status, _, _ = await api.call("GET", path, key, headers={"Host": host})
                assert status != 421, (path, host)
        # A write is refused before its key is even looked at.
        status, _, _ = await api.call("POST", "/api/v1/memories", key, headers={"Host": "evil.example"},
                                      json={"content": "planted"})
        assert status == 421
        assert (await api.call("GET", "/api/v1/memories", key))[1]["memories"] == []


async def test_the_public_url_and_allowed_hosts_are_answered(tmp_path, embedder):
    async with served(tmp_path, embedder, public_url="https://mem.example.org", allowed_hosts=("nas.lan",)) as api:
        for host, want in (("mem.example.org", 200), ("nas.lan:8765", 200), ("example.org", 421)):
            status, _, _ = await api.call("GET", "/healthz", headers={"Host": host})
            assert status == want, host


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_host_policy_answers_only_its_names(host):
    policy = HostPolicy.build("127.0.0.1", "https://mem.example.org", ("nas.lan",))
    name = host_name(host)
    assert policy.host_ok(host) == (name in {"127.0.0.1", "localhost", "::1", "mem.example.org", "nas.lan"})
    if policy.host_ok(host):
        assert name is not None and "/" not in host and "@" not in host


# --- B7: login CSRF (the browser test is test_login_csrf_browser.py) -------------------------

async def test_a_login_needs_json_and_our_origin(tmp_path, embedder):
    async with served(tmp_path, embedder) as api:
        key = api.key("u_alice")
        base = origin(api)
        form = f'{{"key": "{key}", "x": "='.encode() + b'"}'   # what a text/plain cross-site form sends
        async with aiohttp.ClientSession(base_url=base) as http:
            for headers, data, want in (
                    ({"Content-Type": "text/plain", "Origin": base}, form, 415),
                    ({"Content-Type": "application/x-www-form-urlencoded", "Origin": base}, b"key=" + key.encode(), 415),
                    ({"Content-Type": "application/json", "Origin": "http://evil.example"}, json.dumps({"key": key}), 403),
                    ({"Content-Type": "application/json", "Origin": "null"}, json.dumps({"key": key}), 403),
                    ({"Content-Type": "application/json", "Origin": base.replace("127.0.0.1", "localhost")},
                     json.dumps({"key": key}), 403),
                    ({"Content-Type": "application/json"}, json.dumps({"key": key}), 403)):
                async with http.post("/api/v1/session", data=data, headers=headers) as resp:
                    assert resp.status == want, (headers, resp.status)
                    assert "Set-Cookie" not in resp.headers
                    assert (await resp.json())["error"]["code"] in ("unsupported_media_type", "cross_origin")
        status, _, http = await login(api, key)
        async with http:
            assert status == 201


async def test_a_write_from_another_origin_is_refused_even_with_a_key(tmp_path, embedder):
    async with served(tmp_path, embedder) as api:
        key = api.key("u_alice")
        for bad in ("http://evil.example", "null", "http://127.0.0.1:1"):
            status, body, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "x"},
                                             headers={"Origin": bad})
            assert status == 403 and body["error"]["code"] == "cross_origin", bad
        status, _, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "x"},
                                      headers={"Sec-Fetch-Site": "cross-site"})
        assert status == 403
        status, _, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "from a script"})
        assert status == 201  # no Origin: not a browser, judged by its key


# --- B8: login rate and sessions per key ----------------------------------------------------

async def test_logins_are_rate_limited_per_key_and_per_client(tmp_path, embedder):
    async with served(tmp_path, embedder, login_per_minute=6, login_burst=3) as api:
        key = api.key("u_alice")
        statuses = []
        for _ in range(5):
            status, _, http = await login(api, key)
            await http.close()
            statuses.append(status)
        assert statuses[:3] == [201] * 3 and statuses[3:] == [429, 429]
        # The same client with other keys (or guesses) is held back too, before any key is read.
        status, body, http = await login(api, "mg_guess")
        await http.close()
        assert status == 429 and body["error"]["code"] == "rate_limited"


async def test_the_admin_session_survives_ten_thousand_logins_with_another_key(tmp_path, embedder):
    # Limits set as high as they go, so every one of the 10,000 logins succeeds: the worst case for eviction.
    async with served(tmp_path, embedder, login_per_minute=10_000, login_burst=10_000, sessions_per_key=5) as api:
        status, who, admin = await login(api, api.key(scope="admin"))
        assert status == 201
        other = api.key("u_mallory", scope="read")
        sem = asyncio.Semaphore(32)
        base = origin(api)

        async def one(http: aiohttp.ClientSession) -> int:
            async with sem, http.post("/api/v1/session", json={"key": other}, headers={"Origin": base}) as resp:
                return resp.status

        async with aiohttp.ClientSession(base_url=base, cookie_jar=aiohttp.DummyCookieJar()) as http:
            statuses = await asyncio.gather(*(one(http) for _ in range(10_000)))
        assert statuses.count(201) == 10_000
        sessions = api.app.extras["api"].app[SESSIONS]
        assert sessions.count() == 6  # the admin's one and the other key's newest five
        async with admin:
            async with admin.get("/api/v1/admin/users") as resp:
                assert resp.status == 200


def test_a_keys_logins_evict_only_its_own_oldest_session():
    now = [0.0]
    s = Sessions(3600, clock=lambda: now[0], per_key=3, max_sessions=5)
    admin, _ = s.open("admin")
    mine = []
    for i in range(10):
        now[0] = i + 1
        mine.append(s.open("k")[0])
    assert s.touch(admin) is not None
    assert [s.touch(t) is not None for t in mine] == [False] * 7 + [True] * 3
    s.open("k2")
    # Full of live sessions (1 + 3 + 1): a login of a fourth key is refused, nobody is evicted.
    with pytest.raises(SessionsFull):
        s.open("k3")
    assert s.touch(admin) is not None and s.count() == 5


# --- B10: nested JSON -------------------------------------------------------------------------

def nested(depth: int, kind: str) -> str:
    """An object whose one value nests `depth` arrays (or objects) deep."""
    inner = "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth
    return '{"content": "x", "messages": ' + inner + "}"


ROUTES = (("POST", "/api/v1/session", None), ("POST", "/api/v1/memories", "write"),
          ("PATCH", "/api/v1/memories/m_000000000000", "write"), ("POST", "/api/v1/admin/keys", "admin"),
          ("POST", "/api/v1/admin/keys/revoke", "admin"), ("PATCH", "/api/v1/admin/users/console:x", "admin"),
          ("POST", "/api/v1/import", "write"))


@pytest.mark.timeout(600)
async def test_nested_json_is_a_400_on_every_route(tmp_path, embedder):
    async with served(tmp_path, embedder, login_per_minute=10_000, login_burst=10_000) as api:
        keys = {"write": api.key("u_alice"), "admin": api.key(scope="admin")}
        loop = asyncio.get_running_loop()
        seen = []

        async def post(method: str, path: str, scope: str | None, body: str) -> tuple[int, object]:
            headers = {"Content-Type": "application/json", "Origin": origin(api)}
            if scope:
                headers["Authorization"] = f"Bearer {keys[scope]}"
            async with api.http.request(method, path, data=body.encode(), headers=headers) as resp:
                return resp.status, (await resp.json() if resp.content_type == "application/json" else await resp.text())

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
        @given(route=st.sampled_from(ROUTES), kind=st.sampled_from(["list", "dict"]),
               depth=st.one_of(st.integers(MAX_DEPTH + 1, 3000), st.integers(10_000, 200_000)))
        def check(route, kind, depth):
            method, path, scope = route
            body = nested(depth, kind)
            status, answer = asyncio.run_coroutine_threadsafe(post(method, path, scope, body), loop).result()
            seen.append((path, depth, status))
            assert status == 400, (path, depth, status, str(answer)[:300])
            assert isinstance(answer, dict) and answer["error"]["code"] == "bad_request", answer

        await asyncio.to_thread(check)
        assert {p for p, _, _ in seen} == {p for _, p, _ in ROUTES}
        # Shallow bodies still work where they are valid.
        status, _ = await post("POST", "/api/v1/memories", "write", json.dumps({"content": "ok", "tags": ["a"]}))
        assert status == 201


async def test_a_deep_line_in_an_admin_import_is_a_bad_line_not_a_crash(tmp_path, embedder):
    async with served(tmp_path, embedder) as api:
        admin = api.key(scope="admin")
        deep = "[" * 100_000 + "]" * 100_000
        body = (json.dumps({"text": "kept", "id": "m_aaaaaaaaaaaa"}) + "\n" + deep + "\n").encode()
        async with api.http.post("/api/v1/admin/import?space=public", data=body,
                                 headers={"Authorization": f"Bearer {admin}"}) as resp:
            assert resp.status == 202, await resp.text()
            job = (await resp.json())["job_id"]
        for _ in range(600):
            status, state, _ = await api.call("GET", f"/api/v1/admin/jobs/{job}", admin)
            if state["status"] in ("done", "failed"):
                break
            await asyncio.sleep(0.1)
        assert state["status"] == "done" and state["result"]["added"] == 1
        assert state["result"]["bad"] == [[2, "not JSON we read (nested too deeply)"]]


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3),
                    max_leaves=40))
def test_json_depth_is_the_nesting_of_arrays_and_objects(value):
    def depth(v):
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        return 0

    assert json_depth(value) == depth(value)
    if depth(value) <= MAX_DEPTH:
        assert loads_bounded(json.dumps(value)) == value


# --- Also: no-store, Secure cookie behind a TLS proxy -----------------------------------------

async def test_api_answers_are_never_cached(tmp_path, embedder):
    async with served(tmp_path, embedder) as api:
        key = api.key("u_alice")
        await api.call("POST", "/api/v1/memories", key, json={"content": "my locker code is 1234"})
        for method, path in (("GET", "/api/v1/memories"), ("GET", "/api/v1/export"), ("GET", "/api/v1/nowhere"),
                             ("GET", "/healthz"), ("GET", "/"), ("POST", "/api/v1/memories")):
            _, _, headers = await api.call(method, path, key)
            assert headers["Cache-Control"] == "no-store", path
        _, _, headers = await api.call("GET", "/static/app.js")
        assert headers["Cache-Control"] == "max-age=300"  # a shipped file, no one's data


async def test_the_cookie_is_secure_behind_a_tls_proxy(tmp_path, embedder):
    async with served(tmp_path, embedder, public_url="https://mem.example.org") as api:
        key = api.key("u_alice")
        # The proxy forwards the browser's Host and Origin over plain http on loopback.
        status, _, http = await login(api, key, Host="mem.example.org", Origin="https://mem.example.org")
        async with http:
            assert status == 201
        async with aiohttp.ClientSession(base_url=origin(api)) as http:
            async with http.post("/api/v1/session", json={"key": key},
                                 headers={"Host": "mem.example.org", "Origin": "https://mem.example.org"}) as resp:
                cookie = resp.cookies[COOKIE]
                assert resp.status == 201 and cookie["secure"] is True
    async with served(tmp_path / "plain", embedder) as api:
        async with aiohttp.ClientSession(base_url=origin(api)) as http:
            async with http.post("/api/v1/session", json={"key": api.key("u_alice")}, headers={"Origin": origin(api)}) as resp:
                assert resp.status == 201 and not resp.cookies[COOKIE]["secure"]
