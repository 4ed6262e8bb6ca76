"""Keys and auth: 401 for no, wrong, revoked or expired keys; 403 for the wrong scope; 429 past
the rate limit with Retry-After; the key itself is never stored."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import pytest

from bot.access.api_keys import ApiKeyError, Keys, parse_duration
from bot.api.ratelimit import RateLimiter
from bot.app import build_app
from tests.bot.api.conftest import api_settings
from tests.fakes.clock import FakeClock


async def test_no_wrong_revoked_expired_key_is_401(api):
    assert (await api.call("GET", "/api/v1/memories"))[0] == 401
    status, body, headers = await api.call("GET", "/api/v1/memories", "mg_not-a-real-key")
    assert status == 401 and body["error"]["code"] == "unauthorized" and "WWW-Authenticate" in headers
    good = api.key()
    assert (await api.call("GET", "/api/v1/memories", good))[0] == 200
    api.keys.revoke(good[:10])
    assert (await api.call("GET", "/api/v1/memories", good))[0] == 401
    soon = api.key(expires=timedelta(microseconds=1))
    assert (await api.call("GET", "/api/v1/memories", soon))[0] == 401


async def test_x_api_key_header_works_too(api):
    status, _, _ = await api.call("GET", "/api/v1/memories", headers={"X-API-Key": api.key()})
    assert status == 200


async def test_wrong_scope_is_403(api):
    read = api.key(scope="read")
    assert (await api.call("GET", "/api/v1/memories", read))[0] == 200
    status, body, _ = await api.call("POST", "/api/v1/memories", read, json={"content": "x"})
    assert status == 403 and body["error"]["code"] == "forbidden"
    assert (await api.call("GET", "/api/v1/admin/users", api.key()))[0] == 403
    admin = api.key(scope="admin")
    assert (await api.call("GET", "/api/v1/memories", admin))[0] == 403  # admin keys reach no space


async def test_only_hash_and_prefix_are_stored(api):
    key = api.key()
    dump = api.app.store.read(lambda c: c.execute("SELECT * FROM api_keys").fetchall())
    assert key.startswith("mg_") and not any(key in str(v) for row in dump for v in row)
    assert any(key[:10] == row[1] for row in dump)


async def test_expiry_follows_the_clock(tmp_path, store):
    from bot.access.api_keys import KEY_MIGRATIONS
    from memory.store.connection import Store

    clock = FakeClock()
    s = Store(tmp_path / "k.duckdb", 384, extra_migrations=KEY_MIGRATIONS)
    keys = Keys(s, clock=clock.now)
    key, _ = keys.create("read", "u_a", expires=parse_duration("30d"))
    assert keys.verify(key) is not None
    clock.advance(days=30)
    assert keys.verify(key) is None
    with pytest.raises(ApiKeyError):
        keys.revoke("mg_zzzz")
    with pytest.raises(ApiKeyError):
        keys.create("admin", "u_a")
    s.close()


@pytest.mark.parametrize("bad", ["", "30", "d", "-1d", "0d", "3y"])
def test_bad_durations_are_refused(bad):
    with pytest.raises(ApiKeyError):
        parse_duration(bad)


def test_token_bucket_refills_with_time():
    clock = FakeClock()
    rl = RateLimiter(60, 2, clock=clock.monotonic)
    assert rl.take("k") == 0 and rl.take("k") == 0
    wait = rl.take("k")
    assert wait == pytest.approx(1.0)
    assert rl.take("other") == 0           # buckets are per key
    clock.advance(seconds=1)
    assert rl.take("k") == 0


async def test_rate_limit_is_429_with_retry_after(tmp_path, embedder):
    app = build_app(api_settings(tmp_path, rate_limit_per_minute=0.01, rate_limit_burst=3), embedder=embedder,
                    serve_api=True)
    async with app:
        key = app.extras["api"].keys.create("read", "u_a")[0]
        async with aiohttp.ClientSession(base_url=app.extras["api"].url) as http:
            statuses = []
            for _ in range(4):
                async with http.get("/api/v1/memories", headers={"Authorization": f"Bearer {key}"}) as r:
                    statuses.append(r.status)
                    retry = r.headers.get("Retry-After")
                    body = await r.json()
    assert statuses == [200, 200, 200, 429]
    assert int(retry) >= 1 and body["error"]["code"] == "rate_limited"


async def test_errors_are_json_and_unknown_routes_too(api):
    status, body, _ = await api.call("GET", "/api/v1/nope", api.key())
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body, _ = await api.call("POST", "/api/v1/memories", api.key(), data=b"{not json",
                                     headers={"Content-Type": "application/json"})
    assert status == 400 and body["error"]["code"] == "bad_request"


async def test_no_cors_headers(api):
    _, _, headers = await api.call("GET", "/healthz", headers={"Origin": "http://evil.example"})
    assert not any(h.lower().startswith("access-control-") for h in headers)
