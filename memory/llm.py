"""The litellm wrapper: timeouts, retries with backoff, and per-call accounting (calls, prompt
and completion tokens). JSON answers checked against a schema are memory/llm_json.py.

litellm is imported lazily (~5 s) and only after LITELLM_LOCAL_MODEL_COST_MAP is set, because
its import otherwise fetches the model cost map from the internet.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from memory.errors import LLMError, ModelNotRouted, ModelSilent, ModelStopped, ModelTimedOut, ModelTurnedDown, ModelUnreachable
from memory.llm_gate import Lease, ModelGate
from memory.llm_pace import Pace, prompt_tokens_of
from memory.llm_stream import TextSink, streamed
from memory.model_route import litellm_model, litellm_providers, route_problem

log = logging.getLogger(__name__)

_OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DISABLE_TELEMETRY": "1",
}


def set_offline_env() -> None:
    """Stop libraries phoning home (litellm's cost map, Hugging Face hub)."""
    for key, value in _OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def import_litellm():
    """Import litellm with the offline environment set first; quiet its banners."""
    set_offline_env()
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    litellm.drop_params = True
    return litellm


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Completion:
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cut: bool = False  # the model stopped at its token limit (finish_reason "length"): the text is unfinished


@dataclass
class Usage:
    """Running totals of LLM use, per purpose ("reply", "ingest", "task", ...)."""

    calls: dict[str, int] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def add(self, purpose: str, prompt: int, completion: int, ok: bool) -> None:
        self.calls[purpose] = self.calls.get(purpose, 0) + 1
        self.prompt_tokens[purpose] = self.prompt_tokens.get(purpose, 0) + prompt
        self.completion_tokens[purpose] = self.completion_tokens.get(purpose, 0) + completion
        if not ok:
            self.failures[purpose] = self.failures.get(purpose, 0) + 1

    def total_calls(self) -> int:
        return sum(self.calls.values())

    def total_tokens(self) -> int:
        return sum(self.prompt_tokens.values()) + sum(self.completion_tokens.values())


UsageSink = Callable[[str, str, bool, int, int], None]

# The memory space an LLM call is made for. The agent's turn and ingestion set it around their
# calls (`charged_to`); a usage sink reads it, so usage is counted per space without widening
# every LLM call's signature. Unset (None) for gateway-wide work such as the scheduler's jobs.
USAGE_SPACE: ContextVar[str | None] = ContextVar("memgate_usage_space", default=None)


@contextmanager
def charged_to(space_id: str | None) -> Iterator[None]:
    """LLM calls inside this block (and the tasks and threads it starts) count for `space_id`."""
    token = USAGE_SPACE.set(space_id)
    try:
        yield
    finally:
        USAGE_SPACE.reset(token)


class LLM(Protocol):
    """What the memory engine and the agent need from a language model."""

    usage: Usage

    async def complete(self, messages: Sequence[dict[str, Any]], *, purpose: str,
                       tools: Sequence[dict[str, Any]] | None = None, max_tokens: int | None = None,
                       json_mode: bool = False, on_text: TextSink | None = None,
                       json_schema: dict[str, Any] | None = None) -> Completion:
        """One answer. `on_text`, where the call is streamed (`first_token_timeout`), gets the
        answer's text so far as it is written (memory.llm_stream); a retry starts it over.
        `json_schema` ({"name", "schema"}) asks for JSON decoded to that schema where the server
        can (llama.cpp, vLLM, Ollama, OpenAI), else for any JSON object (`json_mode`)."""
        ...


@dataclass(frozen=True)
class LLMSettings:
    model: str
    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    retries: int = 2
    backoff: float = 1.0
    temperature: float = 0.2
    max_tokens: int = 1024
    # Set for calls a person waits on: the answer is streamed and a server that sends no first
    # token within this many seconds is reported (ModelSilent) instead of waited on for `timeout`.
    first_token_timeout: float | None = None
    # False for calls a person waits on: a refused address or a silent server is reported at once
    # (a retry a second later meets the same outage); background work keeps its retries.
    retry_outages: bool = True
    # False for memory work: a call that ran out of time is not sent again as it was (a local
    # server with one slot takes as long again); the caller asks for less (ModelTimedOut).
    retry_timeouts: bool = True


class LiteLLM:
    """The production LLM: litellm.acompletion with timeouts, retries and accounting."""

    def __init__(self, settings: LLMSettings, *, sink: UsageSink | None = None, gate: ModelGate | None = None) -> None:
        self.settings = settings
        self.usage = Usage()
        self._sink = sink
        self._litellm = None
        self._route: str | None = None        # the name litellm is called with (memory/model_route.py)
        self._route_problem: str | None = None
        self.gate = gate  # the endpoint's priority gate (llm_gate.py); None: calls go straight out
        # Response formats this server refused with a 400 ("json_schema", "json_object"): asked
        # for no more, each call taking the next weaker one (LM Studio refuses json_object, older
        # servers json_schema).
        self.refused_formats: set[str] = set()

    def _lib(self):
        if self._litellm is None:
            lib = import_litellm()
            s = self.settings
            self._route = litellm_model(s.model, s.api_base, litellm_providers(lib))
            self._route_problem = route_problem(lib, s.model, s.api_base)
            self._litellm = lib
        return self._litellm

    def warm(self) -> None:
        """Import litellm and run one offline mock call (blocking: call from a thread at start).

        Importing litellm takes ~5 s of CPU and its first call loads more lazily; done inside
        an async call it froze every channel. `complete` also imports off the loop if needed.
        The sync call, not `acompletion` in a loop of its own: litellm binds its async logging
        worker to the loop of its first async call, and that throwaway loop's tasks were then
        carried onto the bot's loop (measured: the first real call is as fast either way)."""
        lib = self._lib()
        if self._route_problem is None:
            lib.completion(model=self._route, messages=[{"role": "user", "content": "warm up"}],
                           mock_response="ok", api_key="sk-warm-up")

    def _account(self, purpose: str, ok: bool, prompt: int, completion: int) -> None:
        self.usage.add(purpose, prompt, completion, ok)
        if self._sink is not None:
            try:
                self._sink(purpose, self.settings.model, ok, prompt, completion)
            except Exception:  # accounting must never break a reply
                log.warning("usage sink failed", exc_info=True)

    async def complete(self, messages, *, purpose, tools=None, max_tokens=None, json_mode=False,
                       on_text=None, json_schema=None) -> Completion:
        s = self.settings
        lib = self._litellm if self._litellm is not None else await asyncio.to_thread(self._lib)
        if self._route_problem is not None:
            self._account(purpose, False, 0, 0)
            raise ModelNotRouted(f"LLM call ({purpose}): litellm cannot route the model name {s.model!r} "
                                 f"({self._route_problem}); no request was sent")
        kwargs: dict[str, Any] = {
            "model": self._route,
            "messages": list(messages),
            "timeout": s.timeout,
            "temperature": s.temperature,
            "max_tokens": max_tokens or s.max_tokens,
            "num_retries": 0,  # retries are ours, so every attempt is counted and backed off
        }
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.api_key:
            kwargs["api_key"] = s.api_key
        elif s.api_base:
            kwargs["api_key"] = "sk-local"  # OpenAI-compatible local servers want some key
        if tools:
            kwargs["tools"] = list(tools)
        formats = self._formats(json_mode, json_schema)
        if formats:
            kwargs["response_format"] = formats.pop(0)
        last: Exception | None = None
        attempt = 0
        while True:
            try:
                if self.gate is None:
                    resp = await self._attempt(lib, kwargs, None, on_text)
                else:  # the wait for a slot is not the call's: its timeouts start in the slot
                    resp = await self.gate.run(purpose, lambda lease: self._attempt(lib, kwargs, lease, on_text))
            except ModelStopped:
                raise  # not a failure of the model: the call was not made, or cut for the stop
            except Exception as exc:  # litellm's exception types vary by provider
                last = exc
                self._account(purpose, False, 0, 0)
                status = getattr(exc, "status_code", None)
                if status == 400 and self._weaker_format(kwargs, formats, exc):
                    continue  # the same attempt, asking for a format the server takes
                if status in (400, 401, 403, 404):
                    break  # a bad request or key will not heal with a retry
                if not s.retry_outages and (isinstance(exc, ModelSilent) or refused(exc)):
                    break
                if not s.retry_timeouts and timed_out(exc):
                    break
                if attempt >= s.retries:
                    break
                # A server that says how long to wait (429/503 Retry-After) is believed, up to
                # one call's timeout; otherwise our jittered exponential backoff.
                asked = retry_after_seconds(exc)
                delay = min(asked, s.timeout) if asked is not None else s.backoff * (2**attempt) * (0.5 + random.random())
                log.warning("LLM call (%s) failed (%s: %s), retry %d in %.1fs%s", purpose, type(exc).__name__,
                            short_error(exc, 160), attempt + 1, delay, " (the server's Retry-After)" if asked is not None else "")
                await asyncio.sleep(delay)
                attempt += 1
                continue
            choice = resp.choices[0]
            msg = choice.message
            usage = getattr(resp, "usage", None)
            pt = int(getattr(usage, "prompt_tokens", 0) or 0)
            ct = int(getattr(usage, "completion_tokens", 0) or 0)
            self._account(purpose, True, pt, ct)
            calls = tuple(
                ToolCall(id=tc.id or f"call_{i}", name=tc.function.name, arguments=tc.function.arguments or "{}")
                for i, tc in enumerate(getattr(msg, "tool_calls", None) or ())
            )
            return Completion(content=msg.content or "", tool_calls=calls, prompt_tokens=pt, completion_tokens=ct,
                              cut=getattr(choice, "finish_reason", None) == "length")
        if isinstance(last, ModelSilent):
            raise last
        status = getattr(last, "status_code", None)
        if status in (400, 401, 403, 404):
            raise ModelTurnedDown(f"LLM call ({purpose}) turned down ({status}): {type(last).__name__}: {short_error(last)}",
                                  status) from last
        if last is not None and refused(last):
            raise ModelUnreachable(f"LLM call ({purpose}) failed: nothing answers at the model's address "
                                   f"({type(last).__name__}: {short_error(last)})") from last
        if last is not None and timed_out(last):
            raise ModelTimedOut(f"LLM call ({purpose}) timed out after {s.timeout:g} s "
                                f"(max_tokens {kwargs['max_tokens']}): {short_error(last)}") from last
        raise LLMError(f"LLM call ({purpose}) failed: {type(last).__name__}: {short_error(last)}")

    async def _attempt(self, lib, kwargs: dict[str, Any], lease: Lease | None, on_text: TextSink | None):
        """One call, with timeouts from what the endpoint was measured to do (llm_pace.py): never
        below the configured ones. A success is measured in turn."""
        s, pace = self.settings, self.gate.pace if self.gate is not None else Pace()
        prompt = prompt_tokens_of(kwargs["messages"])
        timeout = pace.call_timeout(s.timeout, prompt, kwargs["max_tokens"])
        kwargs = {**kwargs, "timeout": timeout}
        t0 = time.monotonic()
        if s.first_token_timeout is None:
            resp = await asyncio.wait_for(lib.acompletion(**kwargs), timeout=timeout + 5)
        else:  # the first token: never past the call's own timeout
            first_wait = min(pace.first_token_timeout(s.first_token_timeout, prompt), timeout)
            resp = await streamed(lib, kwargs, first_wait=first_wait, piece_wait=s.timeout,
                                  max_tokens=int(kwargs["max_tokens"]), on_text=_timed(lease, on_text))
        usage = getattr(resp, "usage", None)
        pace.observe(int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0),
                     time.monotonic() - t0, lease.first_token_s if lease else None)
        return resp

    def _formats(self, json_mode: bool, json_schema: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The response formats to try, strongest first, without those this server refused."""
        out: list[dict[str, Any]] = []
        if json_schema is not None and "json_schema" not in self.refused_formats:
            out.append({"type": "json_schema", "json_schema": json_schema})
        if (json_mode or json_schema is not None) and "json_object" not in self.refused_formats:
            out.append({"type": "json_object"})
        return out

    def _weaker_format(self, kwargs: dict[str, Any], formats: list[dict[str, Any]], exc: BaseException) -> bool:
        """After a 400 that names the response format: remember the refusal and ask with the next
        weaker format (or none). False when the 400 was about something else."""
        current = kwargs.get("response_format")
        text = str(exc).lower()
        if current is None or not any(w in text for w in _FORMAT_WORDS):
            return False
        self.refused_formats.add(current["type"])
        kwargs.pop("response_format")
        if formats:
            kwargs["response_format"] = formats.pop(0)
        log.warning("the model server refused response_format %s (%s); asking with %s from now on", current["type"],
                    short_error(exc, 160), kwargs.get("response_format", {}).get("type", "no format"))
        return True


def _timed(lease: Lease | None, on_text: TextSink | None) -> TextSink | None:
    """The text sink that also marks the lease's first token (its time is the endpoint's measure)."""
    if lease is None:
        return on_text

    def sink(text: str) -> None:
        lease.first_token()
        if on_text is not None:
            on_text(text)
    return sink


# What a 400 says when it is about the response format rather than the request as a whole.
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "grammar", "schema")


def timed_out(exc: BaseException) -> bool:
    """The call ran out of time (litellm's Timeout, openai's APITimeoutError, our wait_for, a 408)."""
    return (isinstance(exc, TimeoutError) or getattr(exc, "status_code", None) == 408
            or type(exc).__name__ in ("Timeout", "APITimeoutError"))


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a failed call's response asked for (Retry-After / retry-after-ms), in seconds.

    litellm keeps the provider's response headers on its exceptions; Retry-After is seconds or
    an HTTP date. None when the server said nothing usable.
    """
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None),
                    getattr(exc, "headers", None)):
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return max(0.0, float(ms) / 1000)
            value = headers.get("retry-after")
        except (AttributeError, TypeError, ValueError):
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            from email.utils import parsedate_to_datetime
            from datetime import UTC, datetime

            return max(0.0, (parsedate_to_datetime(str(value)) - datetime.now(UTC)).total_seconds())
        except (TypeError, ValueError):
            continue
    return None


def refused(exc: BaseException) -> bool:
    """The call found nothing at the address: connection refused, or a host name that does not
    resolve (anywhere in the exception's chain: litellm wraps openai's wrap of httpx's error)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (ConnectionRefusedError, socket.gaierror)) or type(cur).__name__ in _UNREACHABLE_NAMES:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


# aiohttp's DNS failure; not httpx's ConnectError or aiohttp's ClientConnectorError, which also
# wrap connect timeouts on a busy machine (those are retried like any other failure).
_UNREACHABLE_NAMES = frozenset({"ClientConnectorDNSError"})


def short_error(exc: object, limit: int = 300) -> str:
    """An exception as one line, cut to `limit` characters (for logs and error messages)."""
    text = str(exc).replace("\n", " ")
    return text[:limit]
