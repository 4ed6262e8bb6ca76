"""Admin routes the command line uses while the gateway runs (`memgate keys|jobs|memory|reembed`
through the local admin token, bot.operator.remote.RemoteOperator): keys, full job statuses, memory
search and list across spaces or for one person, export (streamed), import and reembed (jobs the
CLI polls), and the server's clock (so `keys list` judges expiry by the gateway's time).
The answers use bot.operator.protocol's wire format and bot.operator.local's functions, so the CLI prints
exactly what it prints offline.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from aiohttp import web

from bot.api.context import CLOCK, ENGINE, HOST, IMPORTS, KEYS, STREAMS
from bot.api.errors import ApiError
from bot.api.jobs import ADMIN_SPACE, admin_job, finish_job, save_result, start_job
from bot.access.api_keys import ApiKeyError
from bot.api.params import body_json, opt_int
from bot.errors import ConfigError
from bot.access.erase_views import plan_json
from bot.operator.protocol import job_json, key_json, line_json, queue_json, user_space
from bot.operator.local import (
    chosen_spaces,
    erase_person,
    erase_plan,
    export_lines,
    import_file,
    import_target,
    list_lines,
    people,
    queue_status,
    reembed_all,
    search_lines,
)
from memory.store.rows import new_id

log = logging.getLogger(__name__)
# An export file is uploaded whole to be imported (the API's usual body limit is for requests, not files).
MAX_IMPORT_BYTES = 512 * 1024 * 1024

routes = web.RouteTableDef()
KINDS = ("fact", "chunk", "task", "skill")


@routes.get("/api/v1/admin/clock")
async def clock(request: web.Request) -> web.Response:
    return web.json_response({"now": request.app[CLOCK]().isoformat()})


@routes.get("/api/v1/admin/job-statuses")
async def job_statuses(request: web.Request) -> web.Response:
    return web.json_response({"jobs": [job_json(j) for j in request.app[HOST].job_statuses()]})


@routes.get("/api/v1/admin/queue")
async def queue(request: web.Request) -> web.Response:
    """The turns waiting to become memory (`memgate jobs`)."""
    engine, clock = request.app[ENGINE], request.app[CLOCK]
    return web.json_response(queue_json(await asyncio.to_thread(queue_status, engine, clock())))


@routes.get("/api/v1/admin/erase")
async def erase_preview(request: web.Request) -> web.Response:
    """?user=NAME | ?space=ID -> what an erase would remove (nothing is erased)."""
    try:
        planned = await erase_plan(request.app[ENGINE], request.app[HOST].access, request.query.get("space"),
                                   request.query.get("user"))
    except ConfigError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return web.json_response(plan_json(planned))


@routes.post("/api/v1/admin/erase")
async def erase(request: web.Request) -> web.Response:
    """{"user": NAME} | {"space": ID} -> erased: the person's space, identities, files; the counts removed."""
    body = await body_json(request)
    space, user = body.get("space"), body.get("user")
    try:
        done = await erase_person(request.app[ENGINE], request.app[HOST].access, str(space) if space else None,
                                  str(user) if user else None)
    except ConfigError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return web.json_response(plan_json(done))


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
    request.app[STREAMS].revoked(rec.id)  # its open event streams end now: nothing more is said on them
    return web.json_response(key_json(rec))


async def _spaces(request: web.Request) -> list[str]:
    """?user=NAME (as `chat --user` or channel:id), ?space=ID, or every space."""
    try:
        return await chosen_spaces(request.app[ENGINE], request.app[HOST].access, request.query.get("space"),
                                   request.query.get("user"))
    except ConfigError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None


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


@routes.get("/api/v1/admin/export")
async def export(request: web.Request) -> web.StreamResponse:
    """JSONL, streamed: the lines `memgate memory export` writes without a gateway."""
    engine, spaces = request.app[ENGINE], await _spaces(request)
    lines = await asyncio.to_thread(lambda: list(export_lines(engine, spaces)))
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8"})
    await resp.prepare(request)
    for line in lines:
        await resp.write(line.encode("utf-8"))
    await resp.write_eof()
    return resp


async def _upload(request: web.Request) -> list[bytes]:
    body = bytearray()
    async for chunk in request.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > MAX_IMPORT_BYTES:
            raise ApiError(413, "too_large", f"an import file may hold at most {MAX_IMPORT_BYTES >> 20} MB")
    return bytes(body).split(b"\n")


@routes.post("/api/v1/admin/import")
async def import_(request: web.Request) -> web.Response:
    """An export file (the body) -> 202 job; ?user= / ?space= say whose memories these are, as on
    the command line; a file that cannot be imported as asked is a 400 saying why."""
    engine, host, q = request.app[ENGINE], request.app[HOST], request.query
    lines = await _upload(request)
    try:
        space_for = await import_target(engine, host.access, lines, q.get("space"), q.get("user"),
                                        q.get("source") or "the file")
    except ConfigError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    rows = sum(1 for line in lines if line.strip())

    def work() -> dict:
        s = import_file(engine, lines, space_for)
        return {"added": s.added, "present": s.present, "bad": [list(b) for b in s.bad], "rows": rows}

    return await _job(request, "import", work)


@routes.post("/api/v1/admin/reembed")
async def reembed(request: web.Request) -> web.Response:
    """Every memory re-embedded with the gateway's embedding model, as a job (one at a time)."""
    if any(t.get_name().startswith("api-reembed") for t in request.app[IMPORTS]):
        raise ApiError(409, "conflict", "a reembed is already running")
    engine = request.app[ENGINE]

    def work() -> dict:
        n, model = reembed_all(engine, engine.embedder)
        return {"count": n, "model": model}

    return await _job(request, "reembed", work)


async def _job(request: web.Request, kind: str, work) -> web.Response:
    """Run `work` (blocking) off the loop as an admin job; its result is saved for polling."""
    app, engine = request.app, request.app[ENGINE]
    job_id, clock = new_id("j"), app[CLOCK]
    await engine.store.awrite(lambda c: start_job(c, job_id, ADMIN_SPACE, kind, clock()))

    async def run() -> None:
        try:
            await engine.store.awrite(lambda c: c.execute("UPDATE api_jobs SET status = 'running' WHERE id = ?", [job_id]))
            result = await asyncio.to_thread(work)
            await engine.store.awrite(lambda c: (save_result(c, job_id, result),
                                                 finish_job(c, job_id, "done", [], None, clock())))
        except Exception as exc:
            log.exception("admin %s job %s failed", kind, job_id)
            error = f"{type(exc).__name__}: {exc}"
            await engine.store.awrite(lambda c: finish_job(c, job_id, "failed", [], error, clock()))

    task = asyncio.create_task(run(), name=f"api-{kind}-{job_id}")
    app[IMPORTS].add(task)
    task.add_done_callback(app[IMPORTS].discard)
    return web.json_response({"job_id": job_id, "status": "queued"}, status=202,
                             headers={"Location": f"/api/v1/admin/jobs/{job_id}"})


@routes.get("/api/v1/admin/jobs/{job_id}")
async def job(request: web.Request) -> web.Response:
    found = await request.app[ENGINE].store.aread(lambda c: admin_job(c, request.match_info["job_id"]))
    if found is None:
        raise ApiError(404, "not_found", f"no job {request.match_info['job_id']}")
    return web.json_response(found)
