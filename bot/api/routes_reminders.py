"""The key's space's reminders: list them, set one (a write key), cancel one. The space always comes
from the key; a reminder set here goes to the person's direct chat (the one they last used for
reminders, else their newest account's). The admin tree lists every person's (the dashboard's Admin).
"""

from __future__ import annotations

from aiohttp import web

from bot.api.auth import space_of
from bot.api.context import API_KEY, HOST
from bot.api.errors import ApiError
from bot.api.params import body_json
from bot.reminders.desk import ReminderDesk
from bot.reminders.views import reminder_json

routes = web.RouteTableDef()
MAX_WHEN = 200


def _desk(request: web.Request) -> ReminderDesk:
    desk = request.app[HOST].reminders
    if desk is None:
        raise ApiError(503, "unavailable", "reminders are not served by this gateway")
    return desk


@routes.get("/api/v1/reminders")
async def list_reminders(request: web.Request) -> web.Response:
    desk, space = _desk(request), space_of(request)
    rows = await desk.store.active([space])
    return web.json_response({"zone": (await desk.zone(space)).key, "reminders": [reminder_json(r) for r in rows]})


@routes.post("/api/v1/reminders")
async def set_reminder(request: web.Request) -> web.Response:
    """{"when": "tomorrow 9:00", "what": "call mum"}: 201 with the reminder, or 422 with the question to ask."""
    desk, space = _desk(request), space_of(request)
    body = await body_json(request)
    when, what = body.get("when"), body.get("what")
    for name, value in (("when", when), ("what", what)):
        if not isinstance(value, str) or not value.strip():
            raise ApiError(400, "bad_request", f"{name} must be a non-empty string")
    if len(when) > MAX_WHEN:
        raise ApiError(413, "too_large", f"when is longer than {MAX_WHEN} characters")
    got = await desk.set(space, None, f"api:{request[API_KEY].id}", when=when, what=what)
    if got.reminder is None:
        raise ApiError(422, got.unclear.kind if got.unclear else "not_set", got.answer)
    return web.json_response({**reminder_json(got.reminder), "confirmation": got.answer}, status=201)


@routes.delete("/api/v1/reminders/{id}")
async def cancel_reminder(request: web.Request) -> web.Response:
    desk, space = _desk(request), space_of(request)
    try:
        rid = int(request.match_info["id"])
    except ValueError:
        raise ApiError(404, "not_found", "no such reminder in this space") from None
    r, _ = await desk.cancel(rid, [space])
    if r is None:
        raise ApiError(404, "not_found", f"no active reminder {rid} in this space")
    return web.json_response(reminder_json(r))


@routes.get("/api/v1/admin/reminders")
async def every_persons_reminders(request: web.Request) -> web.Response:
    """Every active reminder, per person (space), with the names of the accounts of that space."""
    desk = _desk(request)
    rows = await desk.store.store.aread(lambda c: c.execute(
        "SELECT space_id, string_agg(DISTINCT display_name, ', ') FROM identities GROUP BY space_id").fetchall())
    names = dict(rows)
    out: dict[str, list] = {}
    for r in await desk.store.every_active():
        out.setdefault(r.space_id, []).append(reminder_json(r))
    return web.json_response({"people": [{"space_id": space, "name": names.get(space, space), "reminders": items}
                                         for space, items in sorted(out.items())]})
