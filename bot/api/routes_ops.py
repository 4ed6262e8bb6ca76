"""Operations routes, no key needed: GET /healthz (database, ingest queue and its oldest turn's age, channels; and the
answer to the CLI's challenge, bot.gateway_client) and GET /metrics (Prometheus text). Neither
shows anything of anyone's memory."""

from __future__ import annotations

from datetime import UTC

from aiohttp import web

from bot.api.context import CLOCK, ENGINE, HOST, LOCAL_TOKEN, METRICS
from bot.operator.gateway_client import CHALLENGE_HEADER, PROOF_HEADER, gateway_proof

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    engine, host = request.app[ENGINE], request.app[HOST]
    try:
        depth, oldest = await engine.store.aread(lambda c: c.execute(
            "SELECT count(*), min(created_at) FROM ingest_queue WHERE status = 'pending'").fetchone())
        db = "ok"
    except Exception as exc:  # the health check reports trouble, it never raises it
        depth, oldest, db = None, None, f"error: {type(exc).__name__}"
    now = request.app[CLOCK]()
    now = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo is not None else now
    oldest_s = round(max(0.0, (now - oldest).total_seconds()), 1) if oldest is not None else None
    channels = host.channels()
    ok = db == "ok" and all(channels.values())
    # The CLI's challenge: proof that this is the gateway whose token sits in api.token.
    nonce, token = request.headers.get(CHALLENGE_HEADER, ""), request.app[LOCAL_TOKEN].key
    proof = {PROOF_HEADER: gateway_proof(token, nonce)} if token and 0 < len(nonce) <= 128 else {}
    return web.json_response({"status": "ok" if ok else "degraded", "database": db, "ingest_queue": depth,
                              "ingest_oldest_s": oldest_s, "channels": channels}, status=200 if db == "ok" else 503, headers=proof)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    import asyncio

    body = await asyncio.to_thread(request.app[METRICS].render)  # the queue collector reads DuckDB
    return web.Response(body=body, headers={"Content-Type": request.app[METRICS].CONTENT_TYPE})
