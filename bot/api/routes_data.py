"""Routes over a space as a whole: Pulse, Insight (cached until the space changes), export
(streamed) and import (a job), tasks, skills and LLM usage. The space always comes from the key.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta

from aiohttp import web

from bot.api.auth import space_of
from bot.access import erasure
from bot.access.erase_views import GROUPS_STAY, counts_text, plan_json
from bot.access.identities import AccessError
from bot.api.context import API_KEY, CLOCK, ENGINE, ERASE_CODES, HOST, IMPORTS, INSIGHT_CACHE
from bot.api.errors import ApiError
from bot.api.jobs import finish_job, start_job
from bot.api.params import TooDeep, loads_bounded, opt_int, opt_time
from memory.insight import graph
from memory.portable import markdown_head, markdown_line
from memory.store.dialect import dialect_of
from memory.store.pulse import pulse
from memory.store.rows import new_id, utc_naive

log = logging.getLogger(__name__)
routes = web.RouteTableDef()
MAX_BUCKETS = 400
INSIGHT_CACHE_SPACES = 256
INSIGHT_MEMORIES = 5000          # the newest facts and chunks an insight graph is computed from


def _window(request: web.Request, default_days: int):
    now = request.app[CLOCK]()
    until = opt_time(request.query, "until") or now
    since = opt_time(request.query, "since") or until - timedelta(days=default_days)
    if since >= until:
        raise ApiError(400, "bad_request", "since must be before until")
    return since, until


@routes.get("/api/v1/pulse")
async def get_pulse(request: web.Request) -> web.Response:
    space, engine = space_of(request), request.app[ENGINE]
    bucket = request.query.get("bucket", "day")
    if bucket not in ("day", "week"):
        raise ApiError(400, "bad_request", "bucket must be day or week")
    since, until = _window(request, 30)
    if (until - since) / timedelta(days=7 if bucket == "week" else 1) > MAX_BUCKETS:
        raise ApiError(400, "bad_request", f"at most {MAX_BUCKETS} buckets: narrow since/until or use bucket=week")
    p = await engine.store.aread(lambda c: pulse(c, space, since, until, bucket))
    return web.json_response({
        "buckets": [{"start": b.start.isoformat(), "count": b.count, "by_kind": b.by_kind, "by_category": b.by_category}
                    for b in p.buckets],
        "top_tags": [{"tag": t, "count": n} for t, n in p.top_tags], "total": p.total, "bucket": bucket})


@routes.get("/api/v1/insight")
async def get_insight(request: web.Request) -> web.Response:
    space, engine = space_of(request), request.app[ENGINE]
    limit = opt_int(request.query, "limit", 30, 1, 200)

    def read(c):
        mark = c.execute("""SELECT count(*), max(seq), max(updated_at) FROM memories
                            WHERE space_id = ? AND kind IN ('fact', 'chunk')""", [space]).fetchone()
        return tuple(mark)

    mark = await engine.store.aread(read)
    cache = request.app[INSIGHT_CACHE]
    hit = cache.get((space, limit))
    if hit is not None and hit[0] == mark:
        return web.json_response(hit[1], headers={"X-Cache": "hit"})
    rows = await engine.store.aread(lambda c: c.execute(
        """SELECT id, text FROM memories WHERE space_id = ? AND kind IN ('fact', 'chunk') AND status = 'active'
           ORDER BY created_at DESC LIMIT ?""", [space, INSIGHT_MEMORIES]).fetchall())
    g = await asyncio.to_thread(graph, rows, limit)
    body = {"nodes": [{"id": n.id, "label": n.label, "kind": n.kind, "count": n.count, "evidence": list(n.evidence)}
                      for n in g.nodes],
            "edges": [{"source": e.source, "target": e.target, "weight": e.weight, "lift": e.lift,
                       "evidence": list(e.evidence)} for e in g.edges]}
    if len(cache) >= INSIGHT_CACHE_SPACES:
        cache.pop(next(iter(cache)))  # the oldest entry: a bounded cache, whatever the number of spaces
    cache[(space, limit)] = (mark, body)
    return web.json_response(body, headers={"X-Cache": "miss"})


@routes.get("/api/v1/export")
async def export(request: web.Request) -> web.StreamResponse:
    space, engine = space_of(request), request.app[ENGINE]
    fmt = request.query.get("format", "jsonl")
    if fmt not in ("jsonl", "markdown"):
        raise ApiError(400, "bad_request", "format must be jsonl or markdown")
    rows = await asyncio.to_thread(lambda: list(engine.export_rows([space])))
    resp = web.StreamResponse(headers={
        "Content-Type": "application/x-ndjson; charset=utf-8" if fmt == "jsonl" else "text/markdown; charset=utf-8",
        "Content-Disposition": f'attachment; filename="memories.{"jsonl" if fmt == "jsonl" else "md"}"'})
    await resp.prepare(request)
    if fmt == "markdown":
        await resp.write(markdown_head(space).encode())
    for d in rows:
        line = json.dumps(d, ensure_ascii=False) + "\n" if fmt == "jsonl" else markdown_line(d)
        await resp.write(line.encode("utf-8"))
    await resp.write_eof()
    return resp


@routes.delete("/api/v1/me")
async def erase_me(request: web.Request) -> web.Response:
    """Erase the key's own space (write key): every memory, message, task, skill, reminder, file and
    key of it; the people signing in to it become strangers. Without `?confirm=CODE` nothing is
    erased: a 409 shows what would go and the code to confirm with (good once, for this key)."""
    space, engine, key = space_of(request), request.app[ENGINE], request[API_KEY]
    codes = request.app[ERASE_CODES]
    place = f"api-key:{key.id}"
    confirm = request.query.get("confirm", "").strip()
    if not confirm:
        try:
            planned = await erasure.plan(engine, [space])
        except AccessError as exc:   # the public space is everyone's
            raise ApiError(400, "bad_request", str(exc)) from None
        code = codes.issue(place, key.id, planned)
        return web.json_response({
            "error": {"code": "confirmation_required",
                      "message": f"this erases {counts_text(planned)} of this space for good, and this key. "
                                 f"{GROUPS_STAY} Send DELETE /api/v1/me?confirm={code} within {codes.minutes} minutes."},
            "erase": plan_json(planned), "confirm": code, "expires_in_s": int(codes.ttl.total_seconds())}, status=409)
    waiting = codes.take(place, key.id, confirm)
    if waiting is None:
        raise ApiError(409, "bad_confirmation", "that code is not waiting for this key (they last "
                                                f"{codes.minutes} minutes): send DELETE /api/v1/me again for a new one")
    done = await erasure.erase(engine, waiting, by=f"api key {key.prefix}")
    return web.json_response({"erased": plan_json(done)})


def _parse_jsonl(raw: str) -> list[dict]:
    rows = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = loads_bounded(line)
        except TooDeep as exc:
            raise ApiError(400, "bad_request", f"line {n}: {exc}") from None
        except ValueError:
            raise ApiError(400, "bad_request", f"line {n} is not JSON") from None
        if not isinstance(d, dict) or not isinstance(d.get("text"), str) or not d["text"].strip():
            raise ApiError(400, "bad_request", f"line {n} needs a non-empty \"text\"")
        if d.get("kind", "fact") not in ("chunk", "fact", "task", "skill"):
            raise ApiError(400, "bad_request", f"line {n}: unknown kind {d.get('kind')!r}")
        if "created_at" in d:
            try:
                datetime.fromisoformat(d["created_at"])
            except (TypeError, ValueError):
                raise ApiError(400, "bad_request", f"line {n}: created_at must be ISO") from None
        rows.append(d)
    if not rows:
        raise ApiError(400, "bad_request", "the body holds no JSONL rows")
    return rows


@routes.post("/api/v1/import")
async def import_rows(request: web.Request) -> web.Response:
    """JSONL rows (as exported) -> 202 job; rows whose id is already in the space are skipped,
    so importing the same file twice adds nothing the second time."""
    space, engine, now = space_of(request), request.app[ENGINE], request.app[CLOCK]()
    rows = _parse_jsonl(await request.text())
    for d in rows:
        d.setdefault("created_at", utc_naive(now).isoformat())
        d["space_id"] = space  # a key writes to its own space, whatever the file says
    job_id = new_id("j")
    await engine.ensure_space(space, "user")
    await engine.store.awrite(lambda c: start_job(c, job_id, space, "import", now))
    task = asyncio.create_task(_run_import(request.app, job_id, space, rows), name=f"api-import-{job_id}")
    request.app[IMPORTS].add(task)
    task.add_done_callback(request.app[IMPORTS].discard)
    return web.json_response({"job_id": job_id, "status": "queued"}, status=202,
                             headers={"Location": f"/api/v1/jobs/{job_id}"})


async def _run_import(app: web.Application, job_id: str, space: str, rows: list[dict]) -> None:
    engine, clock = app[ENGINE], app[CLOCK]
    try:
        # Rows already here are skipped by the import itself; the job lists the id each row has in
        # this space (a row whose id another space holds is stored under a derived one).
        report = await asyncio.to_thread(engine.import_rows, rows, space)
        await engine.store.awrite(lambda c: finish_job(c, job_id, "done", report.ids, None, clock()))
    except Exception as exc:
        log.exception("API import %s failed", job_id)
        error = f"{type(exc).__name__}: {exc}"
        await engine.store.awrite(lambda c: finish_job(c, job_id, "failed", [], error, clock()))


@routes.get("/api/v1/tasks")
async def tasks(request: web.Request) -> web.Response:
    space, engine = space_of(request), request.app[ENGINE]
    limit = opt_int(request.query, "limit", 50, 1, 200)
    rows = await engine.store.aread(lambda c: c.execute(
        """SELECT id, status, title, summary, chunk_count, started_at, last_at, closed_at, session_id
           FROM tasks WHERE space_id = ? ORDER BY last_at DESC, id LIMIT ?""", [space, limit]).fetchall())
    keys = ("id", "status", "title", "summary", "chunk_count", "started_at", "last_at", "closed_at", "session_id")
    return web.json_response({"tasks": [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in zip(keys, r)}
                                        for r in rows]})


def _skill_json(s) -> dict:
    return {"id": s.id, "name": s.name, "description": s.description, "version": s.version,
            "usage_count": s.usage_count, "created_at": s.created_at.isoformat(), "updated_at": s.updated_at.isoformat()}


@routes.get("/api/v1/skills")
async def skills(request: web.Request) -> web.Response:
    space = space_of(request)
    found = await request.app[HOST].skills.list_skills([space], limit=opt_int(request.query, "limit", 50, 1, 200))
    return web.json_response({"skills": [_skill_json(s) for s in found]})


@routes.get("/api/v1/skills/{name}")
async def skill(request: web.Request) -> web.Response:
    space, lib = space_of(request), request.app[HOST].skills
    s = await lib.get(request.match_info["name"], [space])
    if s is None:
        raise ApiError(404, "not_found", f"no skill {request.match_info['name']} in this space")
    history = await lib.history(s.id, [space])
    return web.json_response({**_skill_json(s), "content": s.content, "versions": [
        {"version": v.version, "changelog": v.changelog, "source_task_id": v.source_task_id,
         "created_at": v.created_at.isoformat(), "content": v.content} for v in history]})


@routes.get("/api/v1/usage")
async def usage(request: web.Request) -> web.Response:
    """LLM calls and tokens by day and purpose charged to the key's space (its turns and their
    ingestion; counts only, never text), with the cost where litellm knows the model's price; and
    per day the turns and the memory tokens their auto-recall injected."""
    space = space_of(request)
    since, until = _window(request, 30)
    host, engine = request.app[HOST], request.app[ENGINE]
    if host.flush_usage is not None:
        await host.flush_usage()
    rows = await engine.store.aread(lambda c: c.execute(
        """SELECT date_trunc('day', called_at), purpose, model, count(*), sum(prompt_tokens), sum(completion_tokens)
           FROM llm_usage_space WHERE space_id = ? AND called_at >= ? AND called_at < ? GROUP BY 1, 2, 3 ORDER BY 1, 2""",
        [space, utc_naive(since), utc_naive(until)]).fetchall())
    # Per turn, the memory block the auto-recall injected (its tokens count against every reply).
    turns = await engine.store.aread(lambda c: c.execute(
        f"""SELECT date_trunc('day', called_at), count(*), sum(injected_tokens), avg(injected_tokens),
                  max(injected_tokens), {dialect_of(c).quantile("injected_tokens", 0.95)}
           FROM turn_usage WHERE space_id = ? AND called_at >= ? AND called_at < ? GROUP BY 1 ORDER BY 1""",
        [space, utc_naive(since), utc_naive(until)]).fetchall())
    return web.json_response({"scope": "space", "usage": [
        {"day": d.date().isoformat(), "purpose": p, "model": m, "calls": n, "prompt_tokens": int(pt or 0),
         "completion_tokens": int(ct or 0), "cost": _cost(m, int(pt or 0), int(ct or 0))}
        for d, p, m, n, pt, ct in rows],
        "turns": [{"day": d.date().isoformat(), "turns": n, "injected_tokens": int(total or 0),
                   "injected_per_turn": round(float(mean or 0), 1), "injected_max": int(top or 0),
                   "injected_p95": round(float(p95 or 0), 1)}
                  for d, n, total, mean, top, p95 in turns]})


def _cost(model: str | None, prompt: int, completion: int) -> float | None:
    """USD where litellm knows the model's price, else None."""
    if not model:
        return None
    try:
        import litellm

        a, b = litellm.cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion)
        return round(a + b, 6)
    except Exception:
        return None
