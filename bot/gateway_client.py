"""The command line's line to a running gateway: `find_gateway` reads the address and the local
admin token the gateway publishes in the data folder and checks that something answers /healthz;
`GatewayClient.call` is one admin API request. Blocking (the CLI is synchronous), stdlib only.

A file left behind by a killed gateway must never make the CLI hang or fail: a dead pid, a refused
connection, a timeout or an answer that is not our health document all mean "no gateway", and the
CLI opens the database itself.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from bot.errors import MemgateError

log = logging.getLogger(__name__)
ADDRESS_FILE = "api.json"    # written by bot.api.server.ApiServer while the gateway runs
TOKEN_FILE = "api.token"
PROBE_TIMEOUT_S = 2.0        # a loopback /healthz answers in milliseconds; a hung port must not hang the CLI
CALL_TIMEOUT_S = 120.0       # a search or a key write on a busy gateway


class GatewayCallError(MemgateError):
    """The running gateway refused or failed a request (its message is the API's own)."""


@dataclass(frozen=True, slots=True)
class GatewayClient:
    """Admin API calls with the gateway's local token."""

    url: str
    token: str
    timeout: float = CALL_TIMEOUT_S

    def call(self, method: str, path: str, body: dict | None = None, **query: object) -> dict:
        """One request; the JSON answer, or GatewayCallError with the API's message."""
        q = "&".join(f"{k}={quote(str(v))}" for k, v in query.items() if v is not None)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path + (f"?{q}" if q else ""), data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise GatewayCallError(_api_message(exc)) from None
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


def find_gateway(data_path: Path, *, timeout: float = PROBE_TIMEOUT_S) -> GatewayClient | None:
    """The running gateway's client, or None when there is none (missing, stale or silent files)."""
    data_path = Path(data_path)
    try:
        address = json.loads((data_path / ADDRESS_FILE).read_text())
        token = (data_path / TOKEN_FILE).read_text().strip()
        url = str(address["url"]).rstrip("/")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not token or not url.startswith("http://") or not _pid_alive(address.get("pid")):
        return None
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=timeout) as resp:
            health = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503 = a degraded gateway, still ours and still running
        try:
            health = json.loads(exc.read())
        except ValueError:
            return None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        log.debug("no gateway at %s (%s): using the database directly", url, _reason(exc))
        return None
    if not isinstance(health, dict) or "database" not in health:
        return None  # something else took the port
    return GatewayClient(url, token)
