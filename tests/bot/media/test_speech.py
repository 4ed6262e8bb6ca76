"""Speech to text through the real litellm against a fake OpenAI-compatible /v1/audio/transcriptions
on 127.0.0.1: a transcript comes back, and an answer past the cap is abandoned as it passes it
(whatever length was announced, or none) and told in one line, never read whole (issue 31's
unbounded reads: iLink's answers were capped in eb4e04b, the transcription's were not)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from bot.media.speech import LiteLLMTranscriber, SpeechSettings, TranscriptionError
from tests.fakes.llm_server import fake_audio

pytestmark = pytest.mark.timeout(300)
CAP = 8 * 1024 * 1024    # as iLink's answers


def transcriber(base_url: str) -> LiteLLMTranscriber:
    return LiteLLMTranscriber(SpeechSettings(model="whisper-1", api_base=base_url, timeout=60))


async def test_a_voice_note_is_transcribed(fake_llm):
    text = await transcriber(fake_llm.base_url).transcribe(fake_audio("water the figs"), filename="n.ogg", mime="audio/ogg")
    assert text == "water the figs"
    assert fake_llm.transcription_requests[-1]["model"] == "whisper-1"


async def test_an_answer_over_the_cap_is_one_clear_line(fake_llm):
    fake_llm.hear = lambda data: "la " * (CAP // 2)   # a JSON answer of 1.5 x the cap, its length announced
    with pytest.raises(TranscriptionError) as got:
        await transcriber(fake_llm.base_url).transcribe(fake_audio("x"), filename="n.ogg", mime="audio/ogg")
    assert str(got.value) == f"the answer passed the {CAP}-byte cap and was abandoned"


async def test_an_answer_without_end_is_abandoned_as_it_passes_the_cap():
    sent = [0]
    stopped = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})   # no length announced
        await resp.prepare(request)
        try:
            await resp.write(b'{"text": "')
            while True:
                await resp.write(b"la " * 20_000)
                sent[0] += 60_000
        finally:
            stopped.set()

    app = web.Application()
    app.router.add_post("/v1/audio/transcriptions", endless)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        with pytest.raises(TranscriptionError) as got:
            await transcriber(f"http://127.0.0.1:{runner.addresses[0][1]}/v1").transcribe(
                fake_audio("x"), filename="n.ogg", mime="audio/ogg")
        assert "cap" in str(got.value) and "\n" not in str(got.value)
        await asyncio.wait_for(stopped.wait(), 60)    # the connection was dropped, not read on
        assert sent[0] < 4 * CAP, sent[0]             # what the socket buffers took, not an endless read
    finally:
        await runner.cleanup()


async def test_openai_without_a_key_is_one_line_not_a_traceback(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(TranscriptionError) as got:
        await LiteLLMTranscriber(SpeechSettings(model="whisper-1", timeout=60)).transcribe(
            fake_audio("x"), filename="n.ogg", mime="audio/ogg")
    assert "\n" not in str(got.value)
