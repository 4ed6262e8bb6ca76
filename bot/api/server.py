"""The HTTP server: `create_app` builds the aiohttp application (middlewares, typed state,
routes; the dashboard is served by this same app at `/`, one origin), and `ApiServer` runs it on the
gateway's event loop as one resource of the exit stack, publishing its address and a local
admin key (mode 600) in the data folder for the CLI while it runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aiohttp import web

from bot.api import (routes_admin, routes_chat, routes_dashboard, routes_data, routes_memories, routes_operator,
                     routes_ops, routes_reminders, routes_session)
from bot.api.auth import auth_middleware
from bot.api.context import (CLOCK, ENGINE, ERASE_CODES, HOST, IMPORTS, INSIGHT_CACHE, KEYS, LIMITER, LOCAL_TOKEN,
                             LOGINS, METRICS, SESSIONS, STREAMS, ApiHost, LocalToken)
from bot.api.errors import error_middleware
from bot.api.mcp_http import MCP_PATH, McpEndpoint
from bot.access.api_keys import Keys
from bot.access.erasure import ERASE_CONFIRM, EraseCodes
from bot.api.origins import POLICY, HostPolicy, host_middleware, no_store
from bot.api.metrics import Metrics
from bot.api.ratelimit import RateLimiter, StreamSlots
from bot.api.sessions import Sessions
from bot.operator.gateway_client import ADDRESS_FILE, TOKEN_FILE
from memory.engine import MemoryEngine
from memory.private_files import private_dir, write_private

log = logging.getLogger(__name__)
# ADDRESS_FILE ({"url", "pid"}: where the running gateway listens) and TOKEN_FILE (a local admin key
# valid while it runs) are read by the CLI, so their names live in bot.operator.gateway_client.


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    max_body_bytes: int = 4 * 1024 * 1024
    rate_per_minute: float = 600.0
    rate_burst: int = 60
    session_idle_seconds: float = 30 * 60
    public_url: str = ""                    # https://... of a TLS proxy in front: answered, Secure cookie
    allowed_hosts: tuple[str, ...] = ()
    login_per_minute: float = 10.0
    login_burst: int = 10
    sessions_per_key: int = 20
    streams_per_key: int = 8                # chat event streams one key may hold open at once


@web.middleware
async def _count(request: web.Request, handler) -> web.StreamResponse:
    resp = await handler(request)
    request.app[METRICS].api_requests.labels(request.method, str(resp.status)).inc()
    return resp


def create_app(engine: MemoryEngine, keys: Keys, host: ApiHost, metrics: Metrics, *,
               settings: ServerSettings = ServerSettings(), clock: Callable[[], datetime],
               monotonic: Callable[[], float] = time.monotonic) -> web.Application:
    """The API application. No CORS headers are ever sent: browsers keep other origins out."""
    # Order: errors outermost (so every refusal gets the JSON shape), then the host and origin
    # check (before anything reads a key), then auth.
    app = web.Application(middlewares=[_count, error_middleware, host_middleware, auth_middleware],
                          client_max_size=settings.max_body_bytes)
    app[POLICY] = HostPolicy.build(settings.host, settings.public_url, settings.allowed_hosts)
    app.on_response_prepare.append(no_store)
    app[ENGINE] = engine
    app[KEYS] = keys
    app[HOST] = host
    app[METRICS] = metrics
    app[CLOCK] = clock
    app[LIMITER] = RateLimiter(settings.rate_per_minute, settings.rate_burst, clock=monotonic)
    app[LOGINS] = RateLimiter(settings.login_per_minute, settings.login_burst, clock=monotonic)
    app[SESSIONS] = Sessions(settings.session_idle_seconds, clock=monotonic, per_key=settings.sessions_per_key)
    app[IMPORTS] = set()
    app[LOCAL_TOKEN] = LocalToken()
    app[INSIGHT_CACHE] = {}
    app[ERASE_CODES] = EraseCodes(clock=clock, ttl=ERASE_CONFIRM)
    app[STREAMS] = StreamSlots(settings.streams_per_key)
    app.on_cleanup.append(_finish_imports)
    app.on_shutdown.append(routes_chat.close_streams)
    for module in (routes_ops, routes_session, routes_memories, routes_data, routes_admin, routes_operator,
                   routes_chat, routes_dashboard, routes_reminders):
        app.add_routes(module.routes)
    mcp = McpEndpoint()
    app.cleanup_ctx.append(mcp.lifespan)
    # POST only: a GET would open the server-to-client event stream, which a stateless server never
    # writes to (it would hold its connection and task until the gateway stops); the spec's answer
    # for a server without one is 405.
    app.router.add_post(MCP_PATH, mcp.handle)
    return app


async def _finish_imports(app: web.Application) -> None:
    """An accepted import is finished before the database closes (it is a job someone polls)."""
    if app[IMPORTS]:
        await asyncio.gather(*app[IMPORTS], return_exceptions=True)


LEGACY_TOKEN_NAME = "local gateway token"   # the name before tokens were tied to a data folder


def local_token_name(data_path: Path) -> str:
    """The name of the gateway's own key for this data folder (gateways on one PostgreSQL but with
    their own folders keep their own keys)."""
    folder = hashlib.sha256(str(Path(data_path).resolve()).encode()).hexdigest()[:12]
    return f"{LEGACY_TOKEN_NAME} {folder}"


class ApiServer:
    """Runs the app on host:port (`async with`); writes api.json and api.token, removes them after."""

    def __init__(self, app: web.Application, keys: Keys, data_path: Path, settings: ServerSettings) -> None:
        self.app, self.keys, self.data_path, self.settings = app, keys, Path(data_path), settings
        self._runner: web.AppRunner | None = None
        self._token_prefix: str | None = None
        self.url = ""

    async def __aenter__(self) -> ApiServer:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        try:
            await site.start()
        except OSError as exc:
            # The API is an extra: a busy port must not keep the bot from answering its channels.
            await self._runner.cleanup()
            self._runner = None
            log.error("API not started: cannot listen on %s:%s (%s); set [api] port to a free port or "
                      "[api] enabled = false", self.settings.host, self.settings.port, exc.strerror)
            return self
        port = self._runner.addresses[0][1]
        # The address the CLI (and a person) reaches: a wildcard host, as in the container, is
        # reached on loopback, which the host policy answers; "0.0.0.0" itself it refuses (421).
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(self.settings.host, self.settings.host)
        self.url = f"http://{host}:{port}"
        self._publish()
        log.info("API listening on %s:%s (reached at %s)", self.settings.host, port, self.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._unpublish()
        if self._runner is not None:
            await self._runner.cleanup()

    def _publish(self) -> None:
        # One live gateway key per data folder: a gateway killed without cleanup left its key live
        # (and its api.token readable); it dies now, before the new one exists.
        name = local_token_name(self.data_path)
        revoked = self.keys.revoke_named((name, LEGACY_TOKEN_NAME))
        if revoked:
            log.info("revoked %d gateway token(s) an earlier run left live", revoked)
        key, rec = self.keys.create("admin", None, name=name)
        self._token_prefix = rec.prefix
        self.app[LOCAL_TOKEN].key = key
        private_dir(self.data_path)
        write_private(self.data_path / TOKEN_FILE, key + "\n")
        write_private(self.data_path / ADDRESS_FILE, json.dumps({"url": self.url, "pid": os.getpid()}) + "\n")

    def _unpublish(self) -> None:
        self.app[LOCAL_TOKEN].key = None
        for name in (ADDRESS_FILE, TOKEN_FILE):
            try:
                (self.data_path / name).unlink()
            except FileNotFoundError:
                pass
        if self._token_prefix:
            try:
                self.keys.revoke(self._token_prefix)
            except Exception:
                log.warning("could not revoke the local API token", exc_info=True)
