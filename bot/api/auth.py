"""Who is calling: `Authorization: Bearer KEY` or `X-API-Key: KEY` -> the key's record on the request.

401 for no key or a wrong, revoked or expired one (one message for all: a caller learns
nothing about which keys exist); 403 for a live key without the scope the route needs; 429 with
Retry-After past the key's token bucket. Paths outside /api/ (health, metrics, the dashboard)
and the login route need no key. With no key header, the dashboard's session cookie stands for
its key, and then every write must carry the session's CSRF token (bot/api/sessions.py).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from bot.api.context import API_KEY, KEYS, LIMITER, SESSIONS
from bot.api.errors import ApiError
from bot.access.api_keys import Scope
from bot.api.ratelimit import retry_after_header
from bot.api.sessions import COOKIE, CSRF_HEADER, csrf_ok

SESSION_PATH = "/api/v1/session"   # login, whoami and logout: the route checks what it needs itself
MCP_PATH = "/mcp"                  # MCP over HTTP (bot/api/mcp_http.py): any live key; each tool checks write
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def needed_scope(method: str, path: str) -> Scope | None:
    """None = public; the admin tree needs admin; reads need read; everything else needs write.
    MCP posts every call, reads too: a read key gets in, and the tools that write refuse it."""
    if path == MCP_PATH:
        return "read"
    if not path.startswith("/api/") or path == SESSION_PATH:
        return None
    if path.startswith("/api/v1/admin/") or path == "/api/v1/admin":
        return "admin"
    return "read" if method in SAFE_METHODS else "write"


def presented_key(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return request.headers.get("X-API-Key", "").strip() or None


@web.middleware
async def auth_middleware(request: web.Request, handler) -> web.StreamResponse:
    scope = needed_scope(request.method, request.path)
    if scope is None:
        return await handler(request)
    key = presented_key(request)
    if key:
        rec = await asyncio.to_thread(request.app[KEYS].verify, key)
    else:
        rec = await _session_key(request)
    if rec is None:
        raise ApiError(401, "unauthorized", "a valid API key is required (Authorization: Bearer KEY)",
                       {"WWW-Authenticate": 'Bearer realm="memgate"'})
    # The gateway's admin key may use MCP for one named person (bot.api.mcp_http.key_door).
    if not rec.allows(scope) and not (request.path == MCP_PATH and rec.scope == "admin"):
        raise ApiError(403, "forbidden", f"this key has {rec.scope} scope; this route needs {scope}")
    wait = request.app[LIMITER].take(rec.id)
    if wait > 0:
        raise ApiError(429, "rate_limited", "too many requests for this key; slow down",
                       {"Retry-After": retry_after_header(wait)})
    request[API_KEY] = rec
    return await handler(request)


async def _session_key(request: web.Request):
    """The live key behind the request's session cookie; a write without the CSRF token is 403."""
    session = request.app[SESSIONS].touch(request.cookies.get(COOKIE))
    if session is None:
        return None
    if request.method not in SAFE_METHODS and not csrf_ok(session, request.headers.get(CSRF_HEADER)):
        raise ApiError(403, "csrf", f"a write with the session cookie needs the {CSRF_HEADER} header from login")
    return await asyncio.to_thread(request.app[KEYS].live, session.key_id)


def space_of(request: web.Request) -> str:
    """The one space this request's key reaches (admin keys reach none through these routes)."""
    rec = request[API_KEY]
    if rec.space_id is None:
        raise ApiError(403, "forbidden", "an admin key reaches the admin routes only; use a space key")
    return rec.space_id
