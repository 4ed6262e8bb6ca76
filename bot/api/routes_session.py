"""The dashboard's login: `POST /api/v1/session {"key": ...}` sets the session cookie and answers
the CSRF token; `GET` says who the cookie stands for; `DELETE` logs out (CSRF checked).

A login must come from our own page: JSON (a cross-site form cannot send it) with our Origin
(login CSRF: another site logging the browser into its own key, so that what the person then
types lands in that key's space). Logins are rate-limited per presented key and per client,
before the key is even looked up.
"""

from __future__ import annotations

import asyncio
import hashlib

from aiohttp import web

from bot.api.context import KEYS, LOGINS, SESSIONS
from bot.api.errors import ApiError
from bot.access.api_keys import ApiKey
from bot.api.origins import POLICY, same_origin_browser
from bot.api.params import body_json
from bot.api.ratelimit import retry_after_header
from bot.api.sessions import COOKIE, CSRF_HEADER, Session, SessionsFull, csrf_ok

routes = web.RouteTableDef()


def _who(rec: ApiKey, s: Session) -> dict:
    return {"scope": rec.scope, "space_id": rec.space_id, "name": rec.name, "prefix": rec.prefix, "csrf": s.csrf,
            "expires_at": rec.expires_at.isoformat() if rec.expires_at else None}


async def _current(request: web.Request) -> tuple[ApiKey, Session]:
    s = request.app[SESSIONS].touch(request.cookies.get(COOKIE))
    rec = await asyncio.to_thread(request.app[KEYS].live, s.key_id) if s else None
    if s is None or rec is None:
        raise ApiError(401, "unauthorized", "not logged in (or the session expired): log in with a key")
    return rec, s


@routes.post("/api/v1/session")
async def login(request: web.Request) -> web.Response:
    """A key (JSON, from our own page) -> the session cookie and its CSRF token."""
    if request.content_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "log in with a JSON body (Content-Type: application/json)")
    if not same_origin_browser(request):
        raise ApiError(403, "cross_origin", "log in from the dashboard itself (its Origin is required)")
    body = await body_json(request)
    key = body.get("key")
    key = key.strip() if isinstance(key, str) else ""
    _throttle(request, key)
    rec = await asyncio.to_thread(request.app[KEYS].verify, key) if key else None
    if rec is None:
        raise ApiError(401, "unauthorized", "that key is not valid (unknown, revoked or expired)")
    try:
        token, s = request.app[SESSIONS].open(rec.id)
    except SessionsFull:
        raise ApiError(503, "busy", "too many dashboard sessions are open; try again later",
                       {"Retry-After": "60"}) from None
    resp = web.json_response({"logged_in": True, **_who(rec, s)}, status=201)
    # No max-age: a browser session cookie; the server ends it after the idle time anyway.
    # Secure when the request came over TLS, or a TLS proxy serves us (api.public_url is https).
    resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/",
                    secure=request.secure or request.app[POLICY].secure_cookie)
    return resp


def _throttle(request: web.Request, key: str) -> None:
    """One token from the client's bucket and one from the presented key's (by digest: a guessed
    key costs the guesser, and a real key cannot be used to churn logins)."""
    limiter = request.app[LOGINS]
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    for bucket in (f"client:{request.remote or '-'}", f"key:{digest}"):
        wait = limiter.take(bucket)
        if wait > 0:
            raise ApiError(429, "rate_limited", "too many logins; wait a moment",
                           {"Retry-After": retry_after_header(wait)})


@routes.get("/api/v1/session")
async def whoami(request: web.Request) -> web.Response:
    """200 either way: the dashboard asks this on every load, and "not logged in" is no error."""
    try:
        rec, s = await _current(request)
    except ApiError:
        return web.json_response({"logged_in": False})
    return web.json_response({"logged_in": True, **_who(rec, s)})


@routes.delete("/api/v1/session")
async def logout(request: web.Request) -> web.Response:
    _, s = await _current(request)
    if not csrf_ok(s, request.headers.get(CSRF_HEADER)):
        raise ApiError(403, "csrf", f"logout needs the {CSRF_HEADER} header from login")
    request.app[SESSIONS].close(request.cookies.get(COOKIE))
    resp = web.json_response({"logged_out": True})
    resp.del_cookie(COOKIE, path="/")
    return resp
