"""The fake OpenAI-compatible server with a real server's limits: a fixed number of requests
served at once (the rest wait their turn, as llama.cpp's slots make them) and a speed per token
(the prompt read at `prompt_rate` tokens/s before the first token, the answer written at `rate`
tokens/s, streamed chunk by chunk when asked).

    async with PacedLLM(slots=1, rate=20, responder=brain.respond) as llm: ...

`served` logs every chat request: when it arrived, when a slot took it, its first token, its end
(time.monotonic), and whether the client went away before the end (cancelled).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web

from tests.fakes.llm_server import FakeLLM, _Answer

__all__ = ["PacedLLM", "Served"]


@dataclass
class Served:
    """One chat request as the server saw it (time.monotonic stamps; 0 = not reached)."""

    body: dict
    arrived: float
    started: float = 0.0
    first_token: float = 0.0
    ended: float = 0.0
    cancelled: bool = False


def _tokens(chars: int) -> int:
    return chars // 4 + 1


class PacedLLM(FakeLLM):
    """FakeLLM serving `slots` chat requests at once, at `rate` answer tokens/s."""

    def __init__(self, *, slots: int = 1, rate: float = 20.0, prompt_rate: float = 500.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.slots = asyncio.Semaphore(slots)
        self.rate = rate
        self.prompt_rate = prompt_rate
        self.served: list[Served] = []
        self._current: dict[asyncio.Task, Served] = {}   # the handler's task -> its log entry, while served

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        entry = Served(body={}, arrived=time.monotonic())
        self.served.append(entry)
        try:
            entry.body = await request.json()   # read again by FakeLLM (aiohttp keeps the bytes)
        except ValueError:
            pass
        task = asyncio.current_task()
        try:
            async with self.slots:
                entry.started = time.monotonic()
                self._current[task] = entry
                response = await super()._chat(request)
                entry.first_token = entry.first_token or time.monotonic()
                entry.ended = time.monotonic()
                return response
        except asyncio.CancelledError:
            entry.cancelled = True   # the client went away (it timed out, or was cancelled)
            raise
        finally:
            self._current.pop(task, None)

    def _entry(self) -> Served | None:
        return self._current.get(asyncio.current_task())

    async def _resolve(self, item, body: dict):
        prompt_chars = sum(len(m.get("content") or "") if isinstance(m.get("content"), str) else 0
                           for m in body.get("messages", []))
        await asyncio.sleep(_tokens(prompt_chars) / self.prompt_rate)
        answer = await super()._resolve(item, body)
        if isinstance(answer, _Answer) and not body.get("stream"):
            await asyncio.sleep(_tokens(len(answer.content or "")) / self.rate)
        return answer

    async def _pace(self, chunk: dict) -> None:
        """A streamed chunk waits for its tokens to be written (a content piece, or a tool call's
        arguments); the first one that carries text is the first token."""
        delta = chunk["choices"][0]["delta"]
        piece = delta.get("content") or "".join((c.get("function") or {}).get("arguments", "")
                                                for c in delta.get("tool_calls") or ())
        if not piece:
            return
        await asyncio.sleep(_tokens(len(piece)) / self.rate)
        entry = self._entry()
        if entry is not None and not entry.first_token:
            entry.first_token = time.monotonic()
