"""Speech to text through litellm's transcription call (`[speech]`): an OpenAI-compatible
/v1/audio/transcriptions (a local whisper server) or any provider litellm knows.

One attempt per call: a failure is told to the person once and the note waits in the inbox for
the gateway's next try (bot/media/reader.py), so retrying here would only delay that line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from memory.llm import import_litellm

log = logging.getLogger(__name__)

__all__ = ["LiteLLMTranscriber", "SpeechSettings", "TranscriptionError", "Transcriber"]


class TranscriptionError(RuntimeError):
    """The speech server did not give a transcript (down, refused, timed out)."""


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

    def __init__(self, settings: SpeechSettings) -> None:
        self.settings = settings
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
        try:
            answer = await asyncio.wait_for(lib.atranscription(**kwargs), timeout=s.timeout + 5)
        except TimeoutError:
            raise TranscriptionError(f"no answer within {s.timeout:g} s") from None
        except Exception as exc:  # litellm maps every provider failure to its own exception types
            raise TranscriptionError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        text = getattr(answer, "text", None)
        if not isinstance(text, str):
            raise TranscriptionError("the answer held no text")
        return text.strip()
