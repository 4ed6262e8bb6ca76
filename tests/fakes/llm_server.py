"""A scripted OpenAI-compatible HTTP server for tests.

The real litellm client talks to it over 127.0.0.1: chat completions (plain and SSE stream),
embeddings, speech-to-text (/v1/audio/transcriptions, multipart as OpenAI takes it) and the
model list. Each chat request pops one item from a FIFO script; an empty
script falls back to the responder, then to the answer "OK".
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import logging
import math
import random
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Union

from aiohttp import web

__all__ = ["After", "CutShort", "Delay", "FakeError", "FakeLLM", "Script", "Streamed", "ToolCall", "fake_audio"]

logger = logging.getLogger(__name__)

MODEL_NAME = "fake-model"
EMBED_MODEL_NAME = "fake-embed"
_MAX_SCRIPT_DEPTH = 32  # a responder that keeps returning callables is a bug in the test


@dataclass
class FakeError:
    """Script item: answer with this HTTP status and an OpenAI error body."""

    status: int = 500
    message: str = "boom"
    retry_after: float | None = None  # sent as the Retry-After header (seconds), as rate limiters do


@dataclass
class ToolCall:
    """One tool call the fake model makes; id defaults to call_N."""

    name: str
    arguments: dict
    id: str | None = None


@dataclass
class Delay:
    """Script item: sleep `seconds`, then answer `then`."""

    seconds: float
    then: Script


@dataclass(frozen=True)
class After:
    """Script item: await `event()` (something the test waits for, not a clock), then answer `then`."""

    event: Callable[[], Awaitable[object]]
    then: Script


@dataclass(frozen=True)
class Streamed:
    """Script item: an answer written slowly, piece by piece. A streamed request gets each piece
    as a chunk of its own, after awaiting `hold(i)` before piece i (i >= 1; something the test
    waits for, not a clock) or, without `hold`, after `every` seconds (benches, subprocess tests
    that watch a reply grow). A request that is not streamed gets the whole text at the end."""

    pieces: tuple[str, ...]
    hold: Callable[[int], Awaitable[object]] | None = None
    every: float = 0.0


@dataclass(frozen=True)
class CutShort:
    """Script item: an answer the model stopped at its token limit (finish_reason "length"); with
    `at`, only its first `at` characters (a JSON answer cut in its middle)."""

    text: str
    at: int | None = None


Script = Union[str, list[ToolCall], FakeError, Delay, After, Streamed, CutShort, Callable[[dict], "Script"]]


@dataclass(frozen=True)
class _Answer:
    """A resolved script item: either text or tool calls (never both)."""

    content: str | None
    tool_calls: tuple[dict, ...] = ()
    slowly: Streamed | None = None  # the text is written piece by piece
    finish: str = "stop"            # the finish_reason of a text answer


class FakeLLM:
    """Scripted OpenAI-compatible server; use as `async with FakeLLM() as llm:`."""

    def __init__(self, responder: Callable[[dict], Script] | None = None, embed_dim: int = 384,
                 models: tuple[str, ...] | None = None) -> None:
        self.requests: list[dict] = []
        # The ids /v1/models lists. Given, the server is strict as vLLM and Ollama are: a chat
        # request for any other name gets 404 (not given: anything is answered, as llama.cpp does).
        self.models = models
        self.request_times: list[float] = []  # time.monotonic() of each chat request, in order
        self.keys: list[str] = []             # the Authorization header of each chat request, in order
        self.embedding_requests: list[dict] = []
        # Speech-to-text: each request's form fields and its file (name, content type, bytes).
        self.transcription_requests: list[dict] = []
        # What the "recogniser" hears in an audio file: by default the words between SPEECH< and >
        # in its bytes (tests make audio files that say something); a FakeError fails the request.
        self.hear: Callable[[bytes], str | FakeError] = _heard_speech
        self.responder = responder
        self.embed_dim = embed_dim
        self.embed_delay = 0.0  # seconds each embeddings request waits (crash tests kill mid-way)
        self._queue: deque[Script] = deque()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind to 127.0.0.1 on an ephemeral port and serve."""
        if self._runner is not None:
            raise RuntimeError("FakeLLM already started")
        app = web.Application(middlewares=[_openai_errors])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/embeddings", self._embeddings)
        app.router.add_post("/v1/audio/transcriptions", self._transcription)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        # handler_cancellation: a client that gives up (timeout tests) cancels a pending Delay
        # instead of leaving a sleeping handler behind; short shutdown so stop() never hangs.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]
        logger.debug("fake LLM listening on %s", self.base_url)

    async def stop(self) -> None:
        """Stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeLLM:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """The api_base litellm wants: http://127.0.0.1:PORT/v1."""
        if self._port is None:
            raise RuntimeError("FakeLLM not started")
        return f"http://127.0.0.1:{self._port}/v1"

    # -- scripting -------------------------------------------------------------------------

    def script(self, *items: Script) -> None:
        """Append answers to the FIFO queue; each chat request pops one."""
        self._queue.extend(items)

    def fail_next(self, n: int, status: int = 500) -> None:
        """Make the next n chat requests fail with `status`, ahead of anything scripted."""
        for _ in range(n):
            self._queue.appendleft(FakeError(status=status, message=f"scripted failure ({status})"))

    @property
    def calls(self) -> int:
        """Number of chat requests received."""
        return len(self.requests)

    def last_messages(self) -> list[dict]:
        """The messages of the latest chat request ([] before any)."""
        return list(self.requests[-1].get("messages", [])) if self.requests else []

    def reset(self) -> None:
        """Forget requests and the script; the responder and the port stay."""
        self.requests.clear()
        self.request_times.clear()
        self.embedding_requests.clear()
        self._queue.clear()
        self._ids = itertools.count(1)

    # -- handlers --------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        self.requests.append(body)
        self.request_times.append(time.monotonic())
        self.keys.append(request.headers.get("Authorization", ""))  # which key reached this server
        if self.models is not None and body.get("model") not in self.models:
            return _error_response(404, f"The model `{body.get('model')}` does not exist.")
        item = self._queue.popleft() if self._queue else self._fallback(body)
        outcome = await self._resolve(item, body)
        if isinstance(outcome, FakeError):
            response = _error_response(outcome.status, outcome.message)
            if outcome.retry_after is not None:
                response.headers["Retry-After"] = f"{outcome.retry_after:g}"
            return response
        model = body.get("model") or MODEL_NAME
        usage = _usage(body.get("messages", []), outcome)
        if body.get("stream"):
            return await self._stream(request, body, model, outcome, usage)
        return web.json_response(_completion(model, outcome, usage))

    def _fallback(self, body: dict) -> Script:
        return self.responder(body) if self.responder is not None else "OK"

    async def _resolve(self, item: Script, body: dict) -> _Answer | FakeError:
        """Turn a script item into an answer, running delays and callables on the way."""
        for _ in range(_MAX_SCRIPT_DEPTH):
            if isinstance(item, Delay):
                await asyncio.sleep(item.seconds)
                item = item.then
            elif isinstance(item, After):
                await item.event()
                item = item.then
            elif isinstance(item, FakeError):
                return item
            elif isinstance(item, str):
                return _Answer(content=item)
            elif isinstance(item, Streamed):
                return _Answer(content="".join(item.pieces), slowly=item)
            elif isinstance(item, CutShort):
                return _Answer(content=item.text[: item.at] if item.at is not None else item.text, finish="length")
            elif isinstance(item, ToolCall):
                item = [item]
            elif isinstance(item, list) and item and all(isinstance(c, ToolCall) for c in item):
                return _Answer(content=None, tool_calls=tuple(self._tool_call(c) for c in item))
            elif callable(item):
                item = item(body)
            else:
                return FakeError(500, f"fake LLM: unusable script item {item!r}")
        return FakeError(500, "fake LLM: script callables nested too deep")

    def _tool_call(self, call: ToolCall) -> dict:
        return {
            "id": call.id or f"call_{next(self._ids)}",
            "type": "function",
            # OpenAI sends arguments as a JSON string, not an object.
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }

    async def _stream(
        self, request: web.Request, body: dict, model: str, answer: _Answer, usage: dict
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        slowly = answer.slowly
        if slowly is not None:
            head = _envelope(model, "chat.completion.chunk")  # one id for the whole answer, like OpenAI
            await resp.write(_sse(_chunk(head, {"role": "assistant", "content": ""})))
            for i, piece in enumerate(slowly.pieces):
                if i and slowly.hold is not None:
                    await slowly.hold(i)
                elif i and slowly.every:
                    await asyncio.sleep(slowly.every)
                await resp.write(_sse(_chunk(head, {"content": piece})))
            await resp.write(_sse(_chunk(head, {}, "stop")))
        else:
            for chunk in _stream_chunks(model, answer):
                await self._pace(chunk)
                await resp.write(_sse(chunk))
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(_sse({**_envelope(model, "chat.completion.chunk"), "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _pace(self, chunk: dict) -> None:
        """Before each streamed chunk: nothing here; a paced server (paced_llm.py) waits its speed."""

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        self.embedding_requests.append(body)
        if self.embed_delay:
            await asyncio.sleep(self.embed_delay)
        raw = body.get("input", [])
        inputs = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, item in enumerate(inputs):
            text = item if isinstance(item, str) else json.dumps(item)
            vector = embed_vector(text, self.embed_dim)
            value: Any = _b64_floats(vector) if as_base64 else vector
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(len(i if isinstance(i, str) else json.dumps(i)) // 4 + 1 for i in inputs)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model") or EMBED_MODEL_NAME,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _transcription(self, request: web.Request) -> web.Response:
        """OpenAI's speech-to-text: a multipart form with `file` and `model` (required), then
        optional `language`, `prompt`, `response_format`, `temperature`. Answers {"text": ...}."""
        if not request.content_type.startswith("multipart/form-data"):
            return _error_response(400, f"expected multipart/form-data, got {request.content_type}")
        form: dict[str, Any] = {}
        reader = await request.multipart()
        async for part in reader:
            if part.filename is not None:
                form[part.name] = {"filename": part.filename, "content_type": part.headers.get("Content-Type", ""),
                                   "data": bytes(await part.read())}
            else:
                form[part.name] = await part.text()
        self.transcription_requests.append(form)
        if "file" not in form or "model" not in form:
            return _error_response(400, "file and model are required")
        heard = self.hear(form["file"]["data"])
        if isinstance(heard, FakeError):
            return _error_response(heard.status, heard.message)
        return web.json_response({"text": heard})

    async def _models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        models = [
            {"id": name, "object": "model", "created": created, "owned_by": "memgate-tests"}
            for name in (self.models if self.models is not None else (MODEL_NAME, EMBED_MODEL_NAME))
        ]
        return web.json_response({"object": "list", "data": models})


def fake_audio(words: str) -> bytes:
    """Bytes of an "audio file" that says `words` to the fake recogniser (an Ogg page header first)."""
    return b"OggS\x00\x02" + b"\x00" * 20 + f"SPEECH<{words}>".encode() + b"\x00" * 64


def _heard_speech(data: bytes) -> str:
    start = data.find(b"SPEECH<")
    if start < 0:
        return ""
    end = data.find(b">", start)
    return data[start + 7 : end].decode("utf-8", "replace")


def embed_vector(text: str, dim: int) -> list[float]:
    """Deterministic unit vector for `text`: Gaussian draws seeded by sha256(text)."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    rng = random.Random(seed)
    raw = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def _b64_floats(vector: list[float]) -> str:
    """Little-endian float32 bytes in base64, as OpenAI sends for encoding_format=base64."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _text_len(content: Any) -> int:
    """Characters of a message content: a string, or the text of a list of parts."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
    return 0


def _usage(messages: list[dict], answer: _Answer) -> dict:
    """Rough token counts: prompt = chars(messages)//4 + 1, completion = chars(answer)//4 + 1."""
    prompt_chars = 0
    for message in messages:
        prompt_chars += _text_len(message.get("content"))
        for call in message.get("tool_calls") or []:
            prompt_chars += len((call.get("function") or {}).get("arguments") or "")
    if answer.content is not None:
        completion_chars = len(answer.content)
    else:
        completion_chars = sum(len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in answer.tool_calls)
    prompt, completion = prompt_chars // 4 + 1, completion_chars // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _envelope(model: str, kind: str) -> dict:
    return {
        "id": f"chatcmpl-fake{random.getrandbits(48):012x}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
    }


def _completion(model: str, answer: _Answer, usage: dict) -> dict:
    """A non-streamed chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": None}
    if answer.tool_calls:
        message["tool_calls"] = list(answer.tool_calls)
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": "tool_calls" if answer.tool_calls else answer.finish,
    }
    return {**_envelope(model, "chat.completion"), "choices": [choice], "usage": usage}


def _stream_chunks(model: str, answer: _Answer) -> list[dict]:
    """The chat.completion.chunk sequence for an answer (one shared id, like OpenAI)."""
    head = _envelope(model, "chat.completion.chunk")

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": "" if answer.content is not None else None})]
    if answer.tool_calls:
        for index, call in enumerate(answer.tool_calls):
            opening = {"index": index, "id": call["id"], "type": "function",
                       "function": {"name": call["function"]["name"], "arguments": ""}}
            chunks.append(chunk({"tool_calls": [opening]}))
            args = call["function"]["arguments"]
            for piece in _pieces(args, 16):
                chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        chunks.append(chunk({}, "tool_calls"))
    else:
        for piece in _pieces(answer.content or "", 8):
            chunks.append(chunk({"content": piece}))
        chunks.append(chunk({}, answer.finish))
    return chunks


def _chunk(head: dict, delta: dict, finish: str | None = None) -> dict:
    return {**head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def _pieces(text: str, size: int) -> list[str]:
    """Split text into consecutive pieces of at most `size` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


_ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    408: ("timeout_error", "timeout"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _error_response(status: int, message: str) -> web.Response:
    """The OpenAI error body {"error": {message, type, code}} with the given status."""
    kind, code = _ERROR_TYPES.get(status, ("server_error", "server_error"))
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": code}}, status=status)


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise web.HTTPBadRequest(reason=f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(reason="body must be a JSON object")
    return body


@web.middleware
async def _openai_errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    """Turn aiohttp's plain-text 404/405/400 into OpenAI's JSON error shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error_response(exc.status, exc.reason or exc.text or "error")
