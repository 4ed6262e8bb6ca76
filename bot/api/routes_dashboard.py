"""The dashboard: `GET /` and `GET /static/{name}`, plain files shipped inside the package
(bot/api/static, read through importlib.resources so an installed wheel serves them too).

Nothing is fetched from elsewhere at run time, and the Content-Security-Policy makes the browser
hold the page to that: scripts, styles and requests from this origin only.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from aiohttp import web

from bot.api.errors import ApiError

routes = web.RouteTableDef()
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@cache
def assets() -> dict[str, bytes]:
    """Every shipped asset by name (a fixed set: a request can never name a path outside it)."""
    root = resources.files("bot.api") / "static"
    return {f.name: f.read_bytes() for f in root.iterdir()
            if f.is_file() and any(f.name.endswith(ext) for ext in _TYPES)}


def _serve(name: str) -> web.Response:
    body = assets().get(name)
    if body is None:
        raise ApiError(404, "not_found", f"no asset {name}")
    ctype = _TYPES["." + name.rsplit(".", 1)[-1]]
    # The HTML is never cached (it names the session's state); assets may be, briefly.
    cache_control = "no-store" if name.endswith(".html") else "max-age=300"
    return web.Response(body=body, headers={"Content-Type": ctype, "Cache-Control": cache_control, **HEADERS})


@routes.get("/")
async def index(request: web.Request) -> web.Response:
    return _serve("index.html")


@routes.get("/static/{name}")
async def static(request: web.Request) -> web.Response:
    return _serve(request.match_info["name"])
