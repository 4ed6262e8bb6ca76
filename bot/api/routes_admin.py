"""Admin routes (admin-scope keys only, checked by auth for the whole /api/v1/admin tree):
pairing requests, people and roles, jobs, stats, and governing the public space.

An admin key stands for the server's operator, so it acts as the command line does (as the owner).
"""

from __future__ import annotations

import logging

from aiohttp import web

from bot.access.identities import AccessError, Identity, Role
from bot.access.pairing import APPROVED_TEXT
from bot.api.context import CLOCK, ENGINE, HOST
from bot.api.errors import ApiError
from bot.api.jobs import recent_jobs
from bot.api.params import body_json, opt_int, page
from bot.api.routes_memories import memory_json, tags_field, text_field
from memory.store.browse import Edit, MemoryFilter, apply_edit, bump_versions, get_views, list_page

audit = logging.getLogger("memgate.audit")
routes = web.RouteTableDef()
# Who an admin key acts as: the operator, with the owner's rights (like `memgate pairing` on the server).
OPERATOR = Identity("api", "operator", "", Role.OWNER, "admin API")


def _identity_json(i: Identity) -> dict:
    return {"identity": i.key, "channel": i.channel, "external_id": i.external_id, "space_id": i.space_id,
            "role": i.role.value, "display_name": i.display_name}


@routes.get("/api/v1/admin/pairing")
async def pairing(request: web.Request) -> web.Response:
    pending = await request.app[HOST].pairing.pending()
    return web.json_response({"requests": [
        {"code": p.code, "identity": p.key, "display_name": p.display_name, "created_at": p.created_at.isoformat(),
         "expires_at": p.expires_at.isoformat()} for p in pending]})


@routes.post("/api/v1/admin/pairing/{code}/approve")
async def approve(request: web.Request) -> web.Response:
    host = request.app[HOST]
    try:
        admitted = await host.pairing.approve(request.match_info["code"], None)
    except AccessError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    ident = admitted.identity
    if host.tell is not None:
        await host.tell(ident.channel, admitted.chat_id, ident.external_id, APPROVED_TEXT)
    return web.json_response({"approved": _identity_json(ident)})


@routes.post("/api/v1/admin/pairing/{code}/deny")
async def deny(request: web.Request) -> web.Response:
    try:
        await request.app[HOST].pairing.deny(request.match_info["code"], None)
    except AccessError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return web.json_response({"denied": request.match_info["code"].upper()})


@routes.get("/api/v1/admin/users")
async def users(request: web.Request) -> web.Response:
    return web.json_response({"users": [_identity_json(i) for i in await request.app[HOST].access.users()]})


@routes.patch("/api/v1/admin/users/{identity}")
async def patch_user(request: web.Request) -> web.Response:
    """{"role": "admin|user|blocked"} or {"blocked": true|false} (unblocking makes a user)."""
    body = await body_json(request)
    if set(body) - {"role", "blocked"} or not body:
        raise ApiError(400, "bad_request", "send role and/or blocked")
    role = body.get("role")
    if "blocked" in body:
        if not isinstance(body["blocked"], bool):
            raise ApiError(400, "bad_request", "blocked must be true or false")
        role = "blocked" if body["blocked"] else (role or "user")
    if role not in ("admin", "user", "blocked"):
        raise ApiError(400, "bad_request", "role must be admin, user or blocked (the owner is set in the config)")
    try:
        ident = await request.app[HOST].access.set_role(request.match_info["identity"], Role(role), OPERATOR)
    except AccessError as exc:
        status = 404 if str(exc).startswith("no user") else 409
        raise ApiError(status, "not_found" if status == 404 else "conflict", str(exc)) from None
    return web.json_response(_identity_json(ident))


@routes.get("/api/v1/admin/jobs")
async def jobs(request: web.Request) -> web.Response:
    engine, host = request.app[ENGINE], request.app[HOST]
    limit = opt_int(request.query, "limit", 50, 1, 500)
    api_jobs = await engine.store.aread(lambda c: recent_jobs(c, limit))
    scheduled = [{"name": s.name, "last_run": s.last_run.isoformat() if s.last_run else None, "runs": s.runs,
                  "failures": s.failures, "last_error": s.last_error, "running": s.running}
                 for s in host.job_statuses()]
    return web.json_response({"jobs": api_jobs, "scheduled": scheduled})


@routes.get("/api/v1/admin/stats")
async def stats(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]

    def read(c):
        by_kind = dict(c.execute("SELECT kind, count(*) FROM memories WHERE status = 'active' GROUP BY kind").fetchall())
        queue = dict(c.execute("SELECT status, count(*) FROM ingest_queue GROUP BY status").fetchall())
        spaces = c.execute("SELECT count(*) FROM spaces").fetchone()[0]
        people = c.execute("SELECT count(*) FROM identities").fetchone()[0]
        keys = c.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL").fetchone()[0]
        return {"memories": by_kind, "ingest_queue": queue, "spaces": spaces, "identities": people, "live_keys": keys}

    return web.json_response(await engine.store.aread(read))


@routes.get("/api/v1/admin/public/memories")
async def public_memories(request: web.Request) -> web.Response:
    engine, public = request.app[ENGINE], request.app[HOST].public_space
    limit, offset = page(request.query)
    views, total = await engine.store.aread(lambda c: list_page(c, public, MemoryFilter(), limit, offset))
    return web.json_response({"memories": [memory_json(m) for m in views], "total": total, "limit": limit,
                              "offset": offset})


@routes.post("/api/v1/admin/public/memories")
async def add_public(request: web.Request) -> web.Response:
    """{"content": "...", "tags": [...]} -> a shared note everyone's recall may bring up (as /public add)."""
    body = await body_json(request)
    if set(body) - {"content", "tags"}:
        raise ApiError(400, "bad_request", "send content and optionally tags")
    text = text_field(body.get("content"), "content")
    tags = tags_field(body["tags"]) if "tags" in body else None
    engine, public, now = request.app[ENGINE], request.app[HOST].public_space, request.app[CLOCK]()
    await engine.ensure_space(public, "public", "public")
    rec = await engine.remember(text, public, source="public")
    if tags is not None:
        await engine.store.awrite(lambda c: apply_edit(c, public, rec.id, Edit(tags=("public", *tags)), None, None, now,
                                                       new_version=False))
    audit.info("public memory %s added through the admin API", rec.id)
    m = (await engine.store.aread(lambda c: get_views(c, public, [rec.id])))[0]
    return web.json_response(memory_json(m), status=201)


@routes.patch("/api/v1/admin/public/memories/{id}")
async def edit_public(request: web.Request) -> web.Response:
    """{"text": "..."} -> the public fact replaced by a new one (the old archived, as `memgate public edit`)."""
    body = await body_json(request)
    if set(body) != {"text"}:
        raise ApiError(400, "bad_request", "send the new text")
    text = text_field(body["text"], "text")
    engine, public, memory_id = request.app[ENGINE], request.app[HOST].public_space, request.match_info["id"]
    rec = await engine.edit(memory_id, text, [public])
    if rec is None:
        raise ApiError(404, "not_found", f"no active memory {memory_id} in the public space")
    audit.info("public memory %s edited through the admin API (now %s)", memory_id, rec.id)
    m = (await engine.store.aread(lambda c: get_views(c, public, [rec.id])))[0]
    return web.json_response(memory_json(m))


@routes.delete("/api/v1/admin/public/memories/{id}")
async def delete_public(request: web.Request) -> web.Response:
    engine, public, memory_id = request.app[ENGINE], request.app[HOST].public_space, request.match_info["id"]
    result = await engine.forget([memory_id], [public])
    if not result.forgotten:
        raise ApiError(404, "not_found", f"no memory {memory_id} in the public space")
    await engine.store.awrite(lambda c: bump_versions(c, list(result.forgotten)))
    return web.json_response({"forgotten": list(result.forgotten)})
