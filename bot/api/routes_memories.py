"""Routes over one space's memories: capture a turn (202 + job) or store one memory (201), list
and search, read, edit with If-Match, forget, and poll jobs. The space always comes from the key.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import datetime

from aiohttp import web

from bot.api.auth import space_of
from bot.api.context import CLOCK, ENGINE, METRICS
from bot.api.errors import ApiError
from bot.api.jobs import load_job
from bot.api.params import body_json, opt_bool, opt_time, page
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.store.browse import (Edit, MemoryFilter, MemoryView, StaleVersion, apply_edit, bump_versions, get_views, list_page,
                                 matching_ids)
from memory.store.rows import new_id

routes = web.RouteTableDef()
KINDS = ("chunk", "fact", "task", "skill")
MAX_TEXT = 20_000
MAX_TAGS = 32
RECALL_MAX = 100  # the most hits recall ranks for one query
READABLE = MemoryFilter(statuses=("active", "retired", "archived"))  # every status but forgotten


def memory_json(m: MemoryView) -> dict:
    d = {"id": m.id, "kind": m.kind, "text": m.text, "title": m.title, "category": m.category, "tags": list(m.tags),
         "pinned": m.pinned, "status": m.status, "created_at": m.created_at.isoformat(),
         "updated_at": m.updated_at.isoformat(), "version": m.version, "superseded_by": m.superseded_by,
         "sources": list(m.sources)}
    if m.score is not None:
        d["score"] = round(m.score, 4)
    return d


def _etag(m: MemoryView) -> dict[str, str]:
    return {"ETag": f'"{m.version}"'}


def text_field(value: object, what: str) -> str:
    """A request's non-empty text of at most MAX_TEXT characters, or a 400/413 naming it."""
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, "bad_request", f"{what} must be a non-empty string")
    if len(value) > MAX_TEXT:
        raise ApiError(413, "too_large", f"{what} is longer than {MAX_TEXT} characters")
    return value


def tags_field(value: object) -> tuple[str, ...]:
    """A request's tag list (deduplicated, trimmed), or a 400."""
    if not isinstance(value, list) or not all(isinstance(t, str) and t.strip() for t in value) or len(value) > MAX_TAGS:
        raise ApiError(400, "bad_request", f"tags must be a list of at most {MAX_TAGS} non-empty strings")
    return tuple(dict.fromkeys(t.strip() for t in value))


async def _one(request: web.Request, memory_id: str) -> MemoryView:
    engine, space = request.app[ENGINE], space_of(request)
    # A forgotten memory is gone for the API (404, the contract), not a tombstone: only the
    # audit trail in the database keeps it. An edited one stays readable (superseded_by says where).
    found = await engine.store.aread(lambda c: get_views(c, space, [memory_id], READABLE))
    if not found:
        raise ApiError(404, "not_found", f"no memory {memory_id} in this space")
    return found[0]


def session_elsewhere(con, session_id: str, space: str) -> bool:
    """Whether any other space has used this session id (a chat's session, a queued or stored turn)."""
    return con.execute(
        """SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = $s AND space_id <> $sp)
               OR EXISTS (SELECT 1 FROM ingest_queue WHERE session_id = $s AND space_id <> $sp)
               OR EXISTS (SELECT 1 FROM memories WHERE session_id = $s AND space_id <> $sp)""",
        {"s": session_id, "sp": space}).fetchone()[0]


@routes.post("/api/v1/memories")
async def create_memory(request: web.Request) -> web.Response:
    body = await body_json(request)
    space, engine, now = space_of(request), request.app[ENGINE], request.app[CLOCK]()
    if "messages" in body:
        msgs = body["messages"]
        if not isinstance(msgs, list) or not msgs or len(msgs) > 100:
            raise ApiError(400, "bad_request", "messages must be a list of 1 to 100 messages")
        turn_msgs = []
        for m in msgs:
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                raise ApiError(400, "bad_request", 'each message needs role "user" or "assistant" and content')
            turn_msgs.append(TurnMessage(role=m["role"], text=text_field(m.get("content"), "content")))
        session = body.get("session_id")
        if session is not None and not isinstance(session, str):
            raise ApiError(400, "bad_request", "session_id must be a string")
        if session is not None and await engine.store.aread(lambda c: session_elsewhere(c, session, space)):
            raise ApiError(403, "forbidden", "that session_id belongs to another space: a key names only its own "
                           "space's sessions")
        job_id = new_id("j")
        await engine.ensure_space(space, "user")
        queued = await engine.capture(CapturedTurn(space_id=space, session_id=session, turn_id=job_id,
                                                   created_at=now, messages=tuple(turn_msgs)))
        if not queued:
            raise ApiError(422, "nothing_to_remember", "after cleaning, the turn holds no text to remember")
        return web.json_response({"job_id": job_id, "status": "queued"}, status=202,
                                 headers={"Location": f"/api/v1/jobs/{job_id}"})
    if "content" in body:
        text = text_field(body["content"], "content")
        pinned = body.get("pinned", False)
        if not isinstance(pinned, bool):
            raise ApiError(400, "bad_request", "pinned must be true or false")
        tags = tags_field(body["tags"]) if "tags" in body else None
        await engine.ensure_space(space, "user")
        rec = await engine.remember(text, space, pinned=pinned, source="api")
        if tags is not None:
            await engine.store.awrite(lambda c: apply_edit(c, space, rec.id, Edit(tags=tags), None, None, now,
                                                                        new_version=False))
        m = await _one(request, rec.id)
        return web.json_response(memory_json(m), status=201, headers={"Location": f"/api/v1/memories/{m.id}", **_etag(m)})
    raise ApiError(400, "bad_request", 'send either {"messages": [...]} (a turn) or {"content": "..."} (a memory)')


@routes.get("/api/v1/memories")
async def list_memories(request: web.Request) -> web.Response:
    q = request.query
    space, engine = space_of(request), request.app[ENGINE]
    limit, offset = page(q)
    kind = q.get("kind") or None
    if kind is not None and kind not in KINDS:
        raise ApiError(400, "bad_request", f"kind must be one of {', '.join(KINDS)}")
    f = MemoryFilter(kinds=(kind,) if kind else (), category=q.get("category") or None, tag=q.get("tag") or None,
                     pinned=opt_bool(q, "pinned"), since=opt_time(q, "since"), until=opt_time(q, "until"))
    text = (q.get("q") or "").strip()
    if not text:
        views, total = await engine.store.aread(lambda c: list_page(c, space, f, limit, offset))
        extra = {}
    else:
        views, total, exact = await _search(request, text, space, f, limit, offset)
        extra = {"total_exact": exact}
    return web.json_response({"memories": [memory_json(m) for m in views], "total": total, "limit": limit,
                              "offset": offset, **extra})


async def _search(request: web.Request, text: str, space: str, f: MemoryFilter, limit: int,
                  offset: int) -> tuple[list[MemoryView], int, bool]:
    """The production recall (hybrid, fused, decayed, MMR), then the filters, then the page.

    Returns the page, the total and whether that total is exact: without filters recall ranks only
    what the page needs plus one, so a full answer means "more follow" (total = that lower bound)."""
    engine, metrics = request.app[ENGINE], request.app[METRICS]
    # Recall's cost grows with the hits it ranks (limit x 5 candidates per source, MMR over them):
    # at 10k memories ranking 100 for a 20-row page tripled a search. Only filters recall cannot
    # apply itself (kind it can) need its deepest ranking, since they drop hits afterwards.
    narrowed = any(v is not None for v in (f.category, f.tag, f.pinned, f.since, f.until))
    depth = RECALL_MAX if narrowed else min(RECALL_MAX, offset + limit + 1)
    started = time.perf_counter()
    hits = await engine.search(text, [space], limit=depth, kinds=f.kinds or None)
    metrics.recall_latency.observe(time.perf_counter() - started)
    scores = {h.id: h.score for h in hits}
    ids = [h.id for h in hits]
    if narrowed:
        ids = await engine.store.aread(lambda c: matching_ids(c, space, ids, f))
    exact = len(hits) < depth or depth == RECALL_MAX
    # Full rows (versions, sources) only for the page, not for every hit.
    views = await engine.store.aread(lambda c: get_views(c, space, ids[offset:offset + limit], f))
    return [_scored(v, scores[v.id]) for v in views], len(ids), exact


def _scored(v: MemoryView, score: float) -> MemoryView:
    return replace(v, score=score)


@routes.get("/api/v1/memories/{id}")
async def get_memory(request: web.Request) -> web.Response:
    m = await _one(request, request.match_info["id"])
    return web.json_response(memory_json(m), headers=_etag(m))


def _if_match(request: web.Request) -> int | None:
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() == "*":
        return None
    try:
        return int(raw.strip().removeprefix("W/").strip('"'))
    except ValueError:
        raise ApiError(400, "bad_request", "If-Match must be the memory's version, e.g. \"3\"") from None


@routes.patch("/api/v1/memories/{id}")
async def patch_memory(request: web.Request) -> web.Response:
    memory_id, space, engine = request.match_info["id"], space_of(request), request.app[ENGINE]
    body = await body_json(request)
    unknown = set(body) - {"text", "tags", "pinned"}
    if unknown:
        raise ApiError(400, "bad_request", f"cannot change {', '.join(sorted(unknown))}: only text, tags, pinned")
    if "pinned" in body and not isinstance(body["pinned"], bool):
        raise ApiError(400, "bad_request", "pinned must be true or false")
    edit = Edit(text=text_field(body["text"], "text") if "text" in body else None,
                tags=tags_field(body["tags"]) if "tags" in body else None, pinned=body.get("pinned"))
    expected = _if_match(request)
    vector = (await asyncio.to_thread(engine.embedder.embed_passages, [edit.text]))[0] if edit.text is not None else None
    now: datetime = request.app[CLOCK]()
    try:
        ok = await engine.store.awrite(lambda c: apply_edit(c, space, memory_id, edit, expected, vector, now))
    except StaleVersion as exc:
        raise ApiError(412, "precondition_failed", f"stale version: the memory is at version {exc.current}; "
                       "read it again and retry", {"ETag": f'"{exc.current}"'}) from None
    if not ok:
        raise ApiError(404, "not_found", f"no active memory {memory_id} in this space")
    m = await _one(request, memory_id)
    return web.json_response(memory_json(m), headers=_etag(m))


@routes.delete("/api/v1/memories/{id}")
async def delete_memory(request: web.Request) -> web.Response:
    """The same forget as the /forget command (the engine's), then the version moves on."""
    memory_id, space, engine = request.match_info["id"], space_of(request), request.app[ENGINE]
    result = await engine.forget([memory_id], [space])
    if not result.forgotten:
        raise ApiError(404, "not_found", f"no memory {memory_id} in this space")
    await engine.store.awrite(lambda c: bump_versions(c, list(result.forgotten)))
    return web.json_response({"forgotten": list(result.forgotten)})


@routes.get("/api/v1/jobs/{job_id}")
async def get_job(request: web.Request) -> web.Response:
    space, engine, job_id = space_of(request), request.app[ENGINE], request.match_info["job_id"]
    job = await engine.store.aread(lambda c: load_job(c, space, job_id))
    if job is None:
        raise ApiError(404, "not_found", f"no job {job_id} in this space")
    return web.json_response(job.as_json())
