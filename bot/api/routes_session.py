"""The dashboard's login: `POST /api/v1/session {"key": ...}` sets the session cookie and answers
the CSRF token; `GET` says who the cookie stands for; `DELETE` logs out (CSRF checked).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from bot.api.context import KEYS, SESSIONS
from bot.api.errors import ApiError
from bot.access.api_keys import ApiKey
from bot.api.params import body_json
from bot.api.sessions import COOKIE, CSRF_HEADER, Session, csrf_ok

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
    body = await body_json(request)
    key = body.get("key")
    rec = await asyncio.to_thread(request.app[KEYS].verify, key.strip()) if isinstance(key, str) else None
    if rec is None:
        raise ApiError(401, "unauthorized", "that key is not valid (unknown, revoked or expired)")
    token, s = request.app[SESSIONS].open(rec.id)
    resp = web.json_response({"logged_in": True, **_who(rec, s)}, status=201)
    # No max-age: a browser session cookie; the server ends it after the idle time anyway.
    resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/", secure=request.secure)
    return resp


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
