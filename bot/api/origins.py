"""Who the API answers: only the host names it is configured for (DNS rebinding gets 421), and for
writes only its own origin (a page elsewhere cannot post into it with the browser's cookie).

Answered host names: the loopback names, the address it listens on when that is a specific one,
the host of `[api] public_url` and `[api] allowed_hosts`. A browser always sends `Origin` with a
POST, PATCH or DELETE; one naming another origin (or `null`) is refused. Clients that are not
browsers send none and are judged by their key alone. Every answer but the dashboard's static
files carries `Cache-Control: no-store`: memories must not sit in a shared or browser cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from bot.api.errors import ApiError

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(value: str | None) -> str | None:
    """The host name of a Host header or origin authority (lower case, no port, no brackets), or None."""
    if not value or any(c in value for c in "/?#@ \t\\"):
        return None
    try:
        parts = urlsplit("//" + value)
        name, _ = parts.hostname, parts.port  # .port raises on a port that is not a number
    except ValueError:
        return None
    return name.rstrip(".") if name else None


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """The host names answered and the public origin (scheme://host[:port]) of a TLS proxy, if any."""

    names: frozenset[str]
    public_origin: str = ""

    @classmethod
    def build(cls, bind_host: str, public_url: str = "", extra: tuple[str, ...] = ()) -> HostPolicy:
        """From the settings: the address listened on, `[api] public_url` and `[api] allowed_hosts`."""
        names = set(LOOPBACK_NAMES)
        if bind_host not in WILDCARD_BINDS:
            names.add(bind_host.strip("[]").lower())
        public = public_url.rstrip("/")
        if public:
            names.add(urlsplit(public).hostname or "")
        names.update(h.strip().lower().rstrip(".") for h in extra if h.strip())
        return cls(frozenset(n for n in names if n), public.lower())

    @property
    def secure_cookie(self) -> bool:
        """Behind a TLS proxy (public_url is https) the cookie is Secure, whatever the hop to us."""
        return self.public_origin.startswith("https://")

    def host_ok(self, host: str | None) -> bool:
        """The Host header names one of ours (any port: the port is the socket's business)."""
        return host_name(host) in self.names

    def origin_ok(self, origin: str, host: str | None) -> bool:
        """The browser's Origin is ours: the public origin, or this very host over plain http
        (as the dashboard is reached on loopback)."""
        origin = origin.strip().lower().rstrip("/")
        if self.public_origin and origin == self.public_origin:
            return True
        parts = urlsplit(origin)
        return (parts.scheme == "http" and not parts.path and host is not None
                and parts.netloc == host.strip().lower() and self.host_ok(host))


POLICY = web.AppKey("host_policy", HostPolicy)


@web.middleware
async def host_middleware(request: web.Request, handler) -> web.StreamResponse:
    """421 for a host name we do not serve, 403 for a write from another origin."""
    policy = request.app[POLICY]
    host = request.headers.get("Host")
    if not host:
        raise ApiError(400, "bad_request", "a Host header is required")
    if not policy.host_ok(host):
        raise ApiError(421, "misdirected", "this server does not answer for that host name "
                       "(add it to [api] allowed_hosts or set [api] public_url)")
    if request.method not in SAFE_METHODS:
        origin = request.headers.get("Origin")
        if origin is not None and not policy.origin_ok(origin, host):
            raise ApiError(403, "cross_origin", "a request from another site is refused")
        if origin is None and request.headers.get("Sec-Fetch-Site") == "cross-site":
            raise ApiError(403, "cross_origin", "a request from another site is refused")
    return await handler(request)


def same_origin_browser(request: web.Request) -> bool:
    """The request names its origin and it is ours (what a login must show: only our own page logs in)."""
    origin = request.headers.get("Origin")
    return origin is not None and request.app[POLICY].origin_ok(origin, request.headers.get("Host"))


async def no_store(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: nothing the API answers is cached (static files set their own policy)."""
    response.headers.setdefault("Cache-Control", "no-store")
