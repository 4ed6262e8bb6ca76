"""One streamed model call (the calls a person waits on): its opening bounded by
`first_token_timeout`, each later piece by `timeout`, the answer's text handed on as it grows (the
reply a person watches being written), and the chunks rebuilt into one whole response.

memory/llm.py's `LiteLLM.complete` calls `streamed` for every attempt; a retry streams from the
start again, and its text starts again from nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from memory.errors import LLMError, ModelSilent

log = logging.getLogger(__name__)

# The answer's text so far, each time it grows: the whole text, not the piece, because a retry
# starts the answer over (the text then gets shorter), and whoever shows it needs the whole of it
# anyway (secrets are found, and markdown is formatted, on the whole text).
TextSink = Callable[[str], None]

# A server that ignores max_tokens (a runaway, or a fake) is not read forever: past what max_tokens
# could hold even at a generous 16 characters a token, the answer is cut there.
STREAM_CHARS_PER_TOKEN = 16


async def streamed(lib, kwargs: dict[str, Any], *, first_wait: float, piece_wait: float, max_tokens: int,
                   on_text: TextSink | None = None):
    """One streamed call, rebuilt into a whole response (litellm's ModelResponse). The opening
    (connect, headers, first chunk) must finish within `first_wait` seconds, each later chunk
    within `piece_wait`. `on_text` gets the answer's text so far whenever a chunk adds to it; a
    sink that raises is logged and no longer called (showing the reply must never break it)."""
    kwargs = {**kwargs, "stream": True, "stream_options": {"include_usage": True}}

    async def opening():
        stream = await lib.acompletion(**kwargs)
        chunks = aiter(stream)
        return stream, chunks, await anext(chunks)

    try:
        stream, chunks, first = await asyncio.wait_for(opening(), timeout=first_wait)
    except TimeoutError:
        raise ModelSilent(f"no first token within {first_wait:g} s", first_wait) from None
    budget = STREAM_CHARS_PER_TOKEN * max_tokens
    got, pieces, chars = [first], [], 0
    sink = on_text
    chunk = first
    while True:
        piece = _content(chunk)
        if piece:
            pieces.append(piece)
            chars += len(piece)
            if sink is not None:
                try:
                    sink("".join(pieces))
                except Exception:
                    log.warning("showing the streamed answer failed; it is no longer shown", exc_info=True)
                    sink = None
        if chars > budget:
            log.warning("streamed answer cut at %d characters (max_tokens %s)", chars, max_tokens)
            closing = getattr(stream, "aclose", None)
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()
            break
        try:
            chunk = await asyncio.wait_for(anext(chunks), timeout=piece_wait)
        except StopAsyncIteration:
            break
        got.append(chunk)
    resp = lib.stream_chunk_builder(got, messages=kwargs["messages"])
    if resp is None or not getattr(resp, "choices", None):
        raise LLMError("the streamed answer was empty")
    return resp


def _content(chunk) -> str:
    """The text a chunk adds to the answer ("" for role, tool-call and usage chunks)."""
    choices = getattr(chunk, "choices", None)
    if not choices:
        return ""
    delta = getattr(choices[0], "delta", None)
    return getattr(delta, "content", None) or ""
