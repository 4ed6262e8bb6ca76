"""The command line's line to a running gateway: `find_gateway` reads the address and the local
admin token the gateway publishes in the data folder and checks that something answers /healthz;
`GatewayClient.call` is one admin API request. Blocking (the CLI is synchronous), stdlib only.

A file left behind by a killed gateway must never make the CLI hang or fail: a dead pid, a refused
connection, a timeout or an answer that is not our health document all mean "no gateway", and the
CLI opens the database itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from bot.errors import MemgateError

log = logging.getLogger(__name__)
ADDRESS_FILE = "api.json"    # written by bot.api.server.ApiServer while the gateway runs
TOKEN_FILE = "api.token"
PROBE_TIMEOUT_S = 2.0        # a loopback /healthz answers in milliseconds; a hung port must not hang the CLI
# The gateway proves it is the one that wrote api.token before the CLI sends the token anywhere:
# the CLI sends a fresh nonce with its /healthz probe; the gateway answers HMAC(token, nonce). A
# process that took the port after the gateway died (or anything else listening there) cannot.
CHALLENGE_HEADER = "X-Memgate-Challenge"
PROOF_HEADER = "X-Memgate-Proof"
CALL_TIMEOUT_S = 120.0       # a search or a key write on a busy gateway


class GatewayCallError(MemgateError):
    """The running gateway refused or failed a request (its message is the API's own)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, None when the gateway did not answer


@dataclass(frozen=True, slots=True)
class GatewayClient:
    """Admin API calls with the gateway's local token."""

    url: str
    token: str
    timeout: float = CALL_TIMEOUT_S

    def call(self, method: str, path: str, body: dict | bytes | None = None, **query: object) -> dict:
        """One request (a JSON body, or raw bytes such as an export file); the JSON answer, or
        GatewayCallError with the API's message."""
        with self._open(method, path, body, query) as resp:
            try:
                return json.loads(resp.read() or b"{}")
            except (TimeoutError, OSError) as exc:
                raise GatewayCallError(f"the running gateway at {self.url} did not answer ({_reason(exc)})") from None

    def lines(self, path: str, **query: object) -> Iterator[bytes]:
        """A streamed GET, line by line (an export), without holding the whole answer. A refusal
        raises here, before the first line."""
        return self._read_lines(self._open("GET", path, None, query))

    def _read_lines(self, resp) -> Iterator[bytes]:
        with resp:
            try:
                yield from resp
            except (TimeoutError, OSError) as exc:
                raise GatewayCallError(f"the running gateway at {self.url} stopped answering ({_reason(exc)})") from None

    def _open(self, method: str, path: str, body: dict | bytes | None, query: dict):
        q = "&".join(f"{k}={quote(str(v))}" for k, v in query.items() if v is not None)
        if isinstance(body, bytes):
            data, ctype = body, "application/octet-stream"
        else:
            data, ctype = (json.dumps(body).encode() if body is not None else None), "application/json"
        req = urllib.request.Request(self.url + path + (f"?{q}" if q else ""), data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}", "Content-Type": ctype})
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise GatewayCallError(_api_message(exc), exc.code) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise GatewayCallError(f"the running gateway at {self.url} did not answer ({_reason(exc)})") from None


def _api_message(exc: urllib.error.HTTPError) -> str:
    try:
        return json.loads(exc.read())["error"]["message"]
    except Exception:
        return f"the gateway answered HTTP {exc.code}"


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc or type(exc).__name__)


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # unknown: let the health probe decide
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def gateway_proof(token: str, nonce: str) -> str:
    """What the gateway that holds `token` answers to the challenge `nonce` (hex HMAC-SHA256)."""
    return hmac.new(token.encode(), b"memgate-gateway-proof\x00" + nonce.encode(), hashlib.sha256).hexdigest()


def find_gateway(data_path: Path, *, timeout: float = PROBE_TIMEOUT_S) -> GatewayClient | None:
    """The running gateway's client, or None when there is none (missing, stale or silent files,
    or something at the address that cannot prove it holds the token: it is never sent there)."""
    data_path = Path(data_path)
    try:
        address = json.loads((data_path / ADDRESS_FILE).read_text())
        token = (data_path / TOKEN_FILE).read_text().strip()
        url = str(address["url"]).rstrip("/")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not token or not url.startswith("http://") or not _pid_alive(address.get("pid")):
        return None
    nonce = secrets.token_hex(16)
    probe = urllib.request.Request(url + "/healthz", headers={CHALLENGE_HEADER: nonce})
    try:
        with urllib.request.urlopen(probe, timeout=timeout) as resp:
            proof = resp.headers.get(PROOF_HEADER, "")
            health = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503 = a degraded gateway, still ours and still running
        try:
            proof = exc.headers.get(PROOF_HEADER, "")
            health = json.loads(exc.read())
        except ValueError:
            return None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        log.debug("no gateway at %s (%s): using the database directly", url, _reason(exc))
        return None
    if not isinstance(health, dict) or "database" not in health:
        return None  # something else took the port
    if not hmac.compare_digest(proof, gateway_proof(token, nonce)):
        log.warning("%s answers but is not the gateway that wrote %s (it did not prove it holds the token); "
                    "the token is not sent there, the database is used directly", url, data_path / TOKEN_FILE)
        return None
    return GatewayClient(url, token)
