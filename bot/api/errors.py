"""One error shape for every route: `{"error": {"code": "...", "message": "..."}}`.

Handlers raise `ApiError`; the middleware turns it (and aiohttp's own HTTP errors, and any
unexpected exception) into that JSON body, so no route writes an error by hand and no
traceback reaches a client.
"""

from __future__ import annotations

import logging

from aiohttp import web

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answer: HTTP status, a stable machine code and a human message."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


# aiohttp's own errors (404 no route, 405, 413 body too large) get a stable code too.
_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 412: "precondition_failed",
               413: "too_large", 415: "unsupported_media_type", 429: "rate_limited"}


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None  # a 405 says what is
        return error_response(exc.status, _HTTP_CODES.get(exc.status, "http_error"), exc.reason, allow)
    except Exception:
        log.exception("API %s %s failed", request.method, request.path)
        return error_response(500, "internal", "internal error (see the gateway log)")
