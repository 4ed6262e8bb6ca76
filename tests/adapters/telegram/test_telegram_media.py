"""Voice notes, photos and files on Telegram (issue 25), end to end on loopback: the real
python-telegram-bot client fetching with getFile and the file download from the fake Bot API,
litellm's transcription call and vision parts against the fake OpenAI-compatible server (which
checks the request shapes), the real gateway, inbox, agent and DuckDB memory."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.app import App, build_app
from bot.config import load_settings
from bot.media.reader import NO_SPEECH_TEXT
from tests.fakes import brain
from tests.fakes.files import tiny_pdf, tiny_png
from tests.fakes.llm_server import FakeError, fake_audio
from tests.fakes.telegram_api import FakeTelegram

OWNER = 1


def reply_requests(fake_llm) -> list[dict]:
    return [r for r in fake_llm.requests if str(r["messages"][0]["content"]).startswith("You are memgate")]


def user_text(content: Any) -> str:
    return content if isinstance(content, str) else next(p["text"] for p in content if p["type"] == "text")


@pytest.fixture
def running(tmp_path, fake_llm, clock, embedder) -> Callable[..., Any]:
    """`async with running(tg, **env) as app:` memgate on the fake Telegram (one data folder per test)."""
    config = tmp_path / "memgate.toml"
    config.write_text("")

    @asynccontextmanager
    async def run(tg: FakeTelegram, **extra: str) -> AsyncIterator[App]:
        env = {"MEMGATE_CONFIG": str(config), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
               "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_MODEL": "fake-model",
               "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_OWNERS": f"telegram:{OWNER}",
               **extra}
        fake_llm.responder = fake_llm.responder or brain.respond
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url, poll_timeout=5,
                                  typing_interval=0.5, retry_delay=0.01)
        app = build_app(load_settings(None, env=env), channels=[adapter], clock=clock.now, embedder=embedder)
        async with app:
            yield app
            await app.gateway.idle()
            await app.engine.worker.drain()

    return run


async def answer(tg: FakeTelegram, msg: dict, n: int = 1) -> list[str]:
    """The bot's first `n` messages quoting `msg` (what the person sees)."""
    def quoting() -> list[dict]:
        return [s for s in tg.sent if (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"]]
    await tg.wait_until(lambda: len(quoting()) >= n, 30)
    return [s["visible_text"] for s in quoting()]


async def chunks(app: App, like: str = "%") -> list[tuple[str, str, str]]:
    """(title, text, space) of the active chunks whose text matches `like`."""
    await app.engine.worker.drain()
    return app.store.read(lambda c: c.execute(
        "SELECT title, text, space_id FROM memories WHERE kind = 'chunk' AND status = 'active' AND text LIKE ? "
        "ORDER BY created_at, title", [like]).fetchall())


SPEECH = {"MEMGATE_SPEECH_MODEL": "whisper-1"}


async def test_a_voice_note_is_transcribed_answered_and_remembered_as_voice(running, fake_llm, tmp_path):
    async with FakeTelegram() as tg, running(tg, **SPEECH, MEMGATE_SPEECH_API_BASE=fake_llm.base_url) as app:
        note = tg.inject_message(OWNER, voice=True, file_data=fake_audio("I fly to Lisbon on Friday"), duration=4)
        (seen,) = await answer(tg, note)
        assert seen.endswith("You said: [voice] I fly to Lisbon on Friday")
        # The request litellm sent: multipart, the model, the audio under `file` named by its format.
        (sent,) = fake_llm.transcription_requests
        assert sent["model"] == "whisper-1"
        assert sent["file"]["filename"] == "voice.ogg" and sent["file"]["content_type"] == "audio/ogg"
        assert sent["file"]["data"] == tg.files[note["voice"]["file_id"]]
        assert tg.downloads == [note["voice"]["file_id"]]
        assert [t for _, t, _ in await chunks(app, "[voice]%")] == ["[voice] I fly to Lisbon on Friday"]
        assert not (tmp_path / "data" / "media").exists()  # the audio is not kept unless configured


async def test_without_a_speech_endpoint_the_note_waits_and_is_answered_once_one_is_set(running, fake_llm, tmp_path):
    async with FakeTelegram() as tg:
        async with running(tg) as app:
            note = tg.inject_message(OWNER, voice=True, file_data=fake_audio("buy oat milk"))
            assert await answer(tg, note) == [NO_SPEECH_TEXT]
            assert "[speech] model" in NO_SPEECH_TEXT
            assert app.gateway.inbox.counts() == {"waiting": 1}
            assert tg.downloads == [] and fake_llm.transcription_requests == []
        # The owner sets [speech] (and asks to keep the audio) and restarts: the note is answered, once.
        async with running(tg, **SPEECH, MEMGATE_SPEECH_API_BASE=fake_llm.base_url,
                           MEMGATE_SPEECH_KEEP_AUDIO="true") as app:
            seen = await answer(tg, note, 2)
            assert seen[1].endswith("You said: [voice] buy oat milk")
            await app.gateway.idle()
            assert app.gateway.inbox.counts() == {"answered": 1}
        (kept,) = (tmp_path / "data" / "media" / "voice").iterdir()
        assert kept.read_bytes() == tg.files[note["voice"]["file_id"]] and kept.stat().st_mode & 0o777 == 0o600


async def test_a_failed_transcription_is_one_line_and_the_note_is_tried_again_then_given_up(running, fake_llm, clock):
    down = lambda audio: FakeError(503, "whisper is loading")  # noqa: E731
    fake_llm.hear = down
    async with FakeTelegram() as tg, running(tg, **SPEECH, MEMGATE_SPEECH_API_BASE=fake_llm.base_url,
                                             MEMGATE_MEDIA_MAX_ATTEMPTS="2") as app:
        note = tg.inject_message(OWNER, voice=True, file_data=fake_audio("call mum at six"))
        (line,) = await answer(tg, note)
        assert "could not transcribe" in line and "try again" in line
        assert app.gateway.inbox.counts() == {"waiting": 1}
        assert await app.gateway.retry_waiting() == 0  # not due yet: tried a moment ago
        fake_llm.hear = lambda audio: "call mum at six"
        clock.advance(minutes=11)  # [media] retry_minutes = 10
        assert await app.gateway.retry_waiting() == 1
        seen = await answer(tg, note, 2)
        assert seen[1].endswith("You said: [voice] call mum at six")
        # A note the speech server never reads is given up after max_attempts, and the person told.
        fake_llm.hear = down
        other = tg.inject_message(OWNER, voice=True, file_data=fake_audio("..."))
        await answer(tg, other)
        clock.advance(minutes=11)
        assert await app.gateway.retry_waiting() == 1
        (_, given_up) = await answer(tg, other, 2)
        assert given_up.startswith("I tried 2 times to read the voice note you sent")
        await app.gateway.idle()
        assert app.gateway.inbox.counts() == {"answered": 1, "closed": 1}


async def test_too_long_or_too_big_is_refused_before_the_download(running, fake_llm):
    async with FakeTelegram() as tg, running(tg, **SPEECH, MEMGATE_SPEECH_API_BASE=fake_llm.base_url,
                                             MEMGATE_MEDIA_MAX_FILE_MB="0.01") as app:
        long_note = tg.inject_message(OWNER, voice=True, file_data=fake_audio("..."), duration=3600)
        assert "60 min long; I transcribe up to 5 min" in (await answer(tg, long_note))[0]
        big = tg.inject_message(OWNER, document="big.txt", file_data=b"x" * 20_000, caption="read this")
        assert "is 20 KB; I take up to 10 KB" in (await answer(tg, big))[0]
        zip_file = tg.inject_message(OWNER, document="photos.zip", file_data=b"PK\x03\x04")
        assert "text, Markdown and PDF" in (await answer(tg, zip_file))[0]
        assert tg.downloads == []  # nothing was fetched to be refused
        # A file Telegram will not serve (getFile refuses it): one line, and the message is kept.
        lost = tg.inject_message(OWNER, document="notes.txt", file_data=b"gone")
        del tg.files[lost["document"]["file_id"]]
        assert (await answer(tg, lost))[0] == "I could not fetch your file just now. I kept your message and will try again."
        await app.gateway.idle()
        assert app.gateway.inbox.counts() == {"answered": 3, "waiting": 1}


async def test_a_photo_reaches_a_vision_model_and_what_it_showed_is_remembered(running, fake_llm):
    png = tiny_png()

    def respond(req: dict) -> Any:
        last = req["messages"][-1]
        if isinstance(last.get("content"), list):
            return "[photo: a brown dog asleep on a red sofa]\nWhat a calm dog! Rex looks comfortable."
        return brain.respond(req)

    fake_llm.responder = respond
    async with FakeTelegram() as tg, running(tg, MEMGATE_MEDIA_VISION="on") as app:
        photo = tg.inject_message(OWNER, photo=True, caption="this is Rex", file_data=png)
        (seen,) = await answer(tg, photo)
        assert seen == "What a calm dog! Rex looks comfortable."  # the description line is ours, not theirs
        (req,) = reply_requests(fake_llm)
        text_part, image_part = req["messages"][-1]["content"]
        assert text_part == {"type": "text", "text": "[photo] this is Rex"}
        assert image_part["type"] == "image_url"
        assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
        assert "[photo: <what it shows" in req["messages"][0]["content"]
        assert tg.downloads == [photo["photo"][-1]["file_id"]]  # the largest size only
        assert [t for _, t, _ in await chunks(app, "[photo%")] == ["[photo: a brown dog asleep on a red sofa] this is Rex"]


async def test_a_pdf_is_read_answered_and_kept_as_chunks_titled_with_its_name(running, fake_llm):
    pdf = tiny_pdf([["Lisbon trip", "Flight TP1234 leaves at 9:40 on Friday."], ["Hotel: Casa do Rio, room 12."]])
    async with FakeTelegram() as tg, running(tg) as app:
        doc = tg.inject_message(OWNER, document="trip.pdf", file_data=pdf, mime_type="application/pdf",
                                caption="keep my travel plan")
        (seen,) = await answer(tg, doc)
        assert "You said: [file: trip.pdf] keep my travel plan" in seen
        (req,) = reply_requests(fake_llm)
        said = user_text(req["messages"][-1]["content"])
        assert '<document name="trip.pdf">' in said and "Casa do Rio, room 12." in said
        rows = await chunks(app, "%TP1234%")
        assert [(title, text) for title, text, _ in rows] == [
            ("trip.pdf", "Lisbon trip\nFlight TP1234 leaves at 9:40 on Friday.\n\nHotel: Casa do Rio, room 12.")]
        # The person's own message is kept as they said it, not with the whole document inside.
        assert [t for _, t, _ in await chunks(app, "[file:%")] == ["[file: trip.pdf] keep my travel plan"]
        assert re.fullmatch(r"user:telegram:1|u_.*|.+", rows[0][2])
