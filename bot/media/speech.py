"""Speech to text through litellm's transcription call (`[speech]`): an OpenAI-compatible
/v1/audio/transcriptions (a local whisper server) or any provider litellm knows.

One attempt per call: a failure is told to the person once and the note waits in the inbox for
the gateway's next try (bot/media/reader.py), so retrying here would only delay that line.

The answer is read capped (`MAX_ANSWER_BYTES`), as the channels' answers and downloads are: on
the OpenAI route (a local whisper server, OpenAI itself) the call goes through a client of ours
whose body is read in chunks and abandoned as it passes the cap, whatever length was announced
(a server answering without end was read to its last byte). Other providers' answers are read by
litellm's own client.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

import httpx

from memory.llm import import_litellm

log = logging.getLogger(__name__)

__all__ = ["LiteLLMTranscriber", "SpeechSettings", "TranscriptionError", "Transcriber"]


# A transcript is text (two hours of speech is ~100 KB, with timings a few MB): far above any real
# answer, and what a server that misbehaves can make us hold.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class TranscriptionError(RuntimeError):
    """The speech server did not give a transcript (down, refused, timed out, answered too much)."""


class Transcriber(Protocol):
    async def transcribe(self, audio: bytes, *, filename: str, mime: str) -> str: ...


@dataclass(frozen=True)
class SpeechSettings:
    model: str
    api_base: str | None = None
    api_key: str | None = None
    language: str = ""
    timeout: float = 60.0


class LiteLLMTranscriber:
    """litellm.atranscription against the configured endpoint; its calls are counted."""

    def __init__(self, settings: SpeechSettings, *, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.settings = settings
        self.max_answer_bytes = max_answer_bytes
        self.calls = 0
        self.seconds = 0.0

    async def transcribe(self, audio: bytes, *, filename: str, mime: str) -> str:
        s = self.settings
        lib = await asyncio.to_thread(import_litellm)  # its first import is seconds of CPU: off the loop
        kwargs: dict = {"model": s.model, "file": (filename, audio, mime or "application/octet-stream"),
                        "timeout": s.timeout, "num_retries": 0}
        if s.api_base:
            kwargs["api_base"] = s.api_base
            # The openai client refuses to send without a key; a local whisper server wants none.
            kwargs["api_key"] = s.api_key or "no-key"
        elif s.api_key:
            kwargs["api_key"] = s.api_key
        if s.language:
            kwargs["language"] = s.language
        self.calls += 1
        capped = _CappedTransport(self.max_answer_bytes)
        async with httpx.AsyncClient(transport=capped, timeout=s.timeout) as http:
            try:
                if _openai_route(lib, s):   # in the try: the client refuses to be made without a key
                    from openai import AsyncOpenAI

                    kwargs["client"] = AsyncOpenAI(api_key=kwargs.get("api_key"), base_url=s.api_base, http_client=http,
                                                   max_retries=0, timeout=s.timeout)
                answer = await asyncio.wait_for(lib.atranscription(**kwargs), timeout=s.timeout + 5)
            except TimeoutError:
                raise TranscriptionError(f"no answer within {s.timeout:g} s") from None
            except Exception as exc:  # litellm maps every provider failure to its own exception types
                if capped.over:
                    raise TranscriptionError(f"the answer passed the {self.max_answer_bytes}-byte cap "
                                             "and was abandoned") from None
                raise TranscriptionError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        text = getattr(answer, "text", None)
        if not isinstance(text, str):
            raise TranscriptionError("the answer held no text")
        return text.strip()


def _openai_route(lib, s: SpeechSettings) -> bool:
    """Whether litellm sends this model to an OpenAI server (`api_base`'s, or OpenAI's own): then
    our capped client can make the call. Another provider keeps litellm's own client."""
    try:
        return lib.get_llm_provider(model=s.model, api_base=s.api_base)[1] == "openai"
    except Exception:  # a name litellm cannot route: its own call says so
        return False


class _CappedTransport(httpx.AsyncBaseTransport):
    """httpx's transport with every answer body read capped: abandoned as it passes `max_bytes`
    (`over` then says why the call failed). Answers come uncompressed (asked so), so the cap is
    on what is held."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.over = False
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        got = await self._inner.handle_async_request(request)
        declared = got.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            self.over = True
            await got.aclose()
            raise TranscriptionError(f"the answer announced {declared} bytes, over the {self.max_bytes}-byte cap")
        if got.headers.get("Content-Encoding", "identity").lower() != "identity":
            await got.aclose()
            raise TranscriptionError("the speech server answered compressed, though asked not to")
        return httpx.Response(got.status_code, headers=got.headers, stream=_CappedBody(got.stream, self),
                              extensions=got.extensions, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedBody(httpx.AsyncByteStream):
    def __init__(self, body: httpx.AsyncByteStream, transport: _CappedTransport) -> None:
        self._body = body
        self._transport = transport

    async def __aiter__(self):
        seen, cap = 0, self._transport.max_bytes
        async for chunk in self._body:
            seen += len(chunk)
            if seen > cap:
                self._transport.over = True
                raise TranscriptionError(f"the answer passed the {cap}-byte cap")
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()
