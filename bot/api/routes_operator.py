"""Admin routes the command line uses while the gateway runs (`memgate keys|jobs|memory` through
the local admin token, bot.operator.RemoteOperator): keys, full job statuses, memory search and
list across spaces, and the server's clock (so `keys list` judges expiry by the gateway's time).
The answers use bot.operator's wire format, so the CLI prints exactly what it prints offline.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from aiohttp import web

from bot.api.context import CLOCK, ENGINE, HOST, KEYS
from bot.api.errors import ApiError
from bot.api.keys import ApiKeyError
from bot.api.params import body_json, opt_int
from bot.errors import ConfigError
from bot.operator import (
    all_spaces,
    job_json,
    key_json,
    line_json,
    list_lines,
    people,
    search_lines,
    user_space,
)

routes = web.RouteTableDef()
KINDS = ("fact", "chunk", "task", "skill")


@routes.get("/api/v1/admin/clock")
async def clock(request: web.Request) -> web.Response:
    return web.json_response({"now": request.app[CLOCK]().isoformat()})


@routes.get("/api/v1/admin/job-statuses")
async def job_statuses(request: web.Request) -> web.Response:
    return web.json_response({"jobs": [job_json(j) for j in request.app[HOST].job_statuses()]})


@routes.get("/api/v1/admin/keys")
async def list_keys(request: web.Request) -> web.Response:
    keys = await asyncio.to_thread(request.app[KEYS].list)
    return web.json_response({"keys": [key_json(k) for k in keys]})


@routes.post("/api/v1/admin/keys")
async def create_key(request: web.Request) -> web.Response:
    """{"scope", "space_id" | "user", "expires_s", "name"} -> the key (shown once) and its record."""
    body = await body_json(request)
    scope, space, user = body.get("scope"), body.get("space_id"), body.get("user")
    expires_s, name = body.get("expires_s"), body.get("name")
    if expires_s is not None and (not isinstance(expires_s, (int, float)) or expires_s <= 0):
        raise ApiError(400, "bad_request", "expires_s must be a positive number of seconds")
    engine, host = request.app[ENGINE], request.app[HOST]
    try:
        if user:
            space = user_space(await people(host.access), str(user))
        if space:
            await engine.ensure_space(str(space), "user")
        key, rec = await asyncio.to_thread(request.app[KEYS].create, scope, None if scope == "admin" else space,
                                           expires=timedelta(seconds=expires_s) if expires_s else None, name=name)
    except (ApiKeyError, ConfigError) as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return web.json_response({"key": key, "record": key_json(rec)}, status=201)


@routes.post("/api/v1/admin/keys/revoke")
async def revoke_key(request: web.Request) -> web.Response:
    body = await body_json(request)
    try:
        rec = await asyncio.to_thread(request.app[KEYS].revoke, str(body.get("prefix", "")))
    except ApiKeyError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return web.json_response(key_json(rec))


async def _spaces(request: web.Request) -> list[str]:
    space = request.query.get("space")
    return [space] if space else await request.app[ENGINE].store.aread(all_spaces)


@routes.get("/api/v1/admin/memories/search")
async def search(request: web.Request) -> web.Response:
    q = request.query.get("q", "").strip()
    if not q:
        raise ApiError(400, "bad_request", "q is required")
    limit = opt_int(request.query, "limit", 10, 1, 200)
    lines = await search_lines(request.app[ENGINE], q, await _spaces(request), limit)
    return web.json_response({"memories": [line_json(m) for m in lines]})


@routes.get("/api/v1/admin/memories/list")
async def list_memories(request: web.Request) -> web.Response:
    kinds = [k for k in request.query.get("kind", "fact").split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        raise ApiError(400, "bad_request", f"kind must be among {', '.join(KINDS)}")
    limit = opt_int(request.query, "limit", 50, 1, 10_000)
    lines = await list_lines(request.app[ENGINE], await _spaces(request), kinds, limit)
    return web.json_response({"memories": [line_json(m) for m in lines]})
