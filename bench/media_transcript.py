"""The closing-note transcript of issue 25: a voice note, a photo and a PDF sent on Telegram, each
answered; a day later, in a new process and a new session (fake clock), each recalled; then the
memory rows they left and what reading them cost.

Everything is real but the far ends: the TelegramAdapter (python-telegram-bot) against the fake
Bot API (getFile and the download), litellm against the fake OpenAI-compatible server for the
transcription (/v1/audio/transcriptions) and for a reply model that sees (image parts), pypdf on a
real PDF, the gateway, inbox, agent, DuckDB and the local e5 embedder. The fake model answers the
day-two questions only from the <memory-context> block it is given, so what it says was recalled.

    python bench/media_transcript.py
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from adapters.telegram.adapter import TelegramAdapter  # noqa: E402
from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from memory import prompts  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from memory.text import MEMORY_CLOSE, MEMORY_OPEN, estimate_tokens  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.clock import FakeClock  # noqa: E402
from tests.fakes.files import tiny_pdf, tiny_png  # noqa: E402
from tests.fakes.llm_server import FakeLLM, fake_audio  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402

OWNER = 1
DESCRIPTION = "a brown dog asleep on a red sofa"
DAY_TWO = [("When is my flight to Lisbon?", "flight"), ("What was in the photo of my dog?", "photo"),
           ("Which hotel is in my travel plan?", "hotel")]


def responder(req: dict) -> object:
    """Day one: a short answer (the picture described first, as the system prompt asks). Day two:
    the memory lines that hold the question's keyword, quoted from the recall block."""
    system = str(req["messages"][0]["content"])
    if not system.startswith("You are memgate"):
        return brain.respond(req)
    last = req["messages"][-1]["content"]
    if isinstance(last, list):
        return f"[photo: {DESCRIPTION}]\nWhat a calm dog! Rex looks very comfortable."
    for question, keyword in DAY_TWO:
        if last == question:
            block = system.split(MEMORY_OPEN, 1)[1].split(MEMORY_CLOSE, 1)[0] if MEMORY_OPEN in system else ""
            lines = [ln.strip() for ln in block.splitlines() if keyword in ln.lower() and ln.strip().startswith("-")]
            return "From what I remember: " + (lines[0] if lines else "nothing about that.")
    if "[voice]" in last:
        return "Noted: Lisbon on Friday, flight TP1234 at 9:40. Have a good trip!"
    if "[file: trip.pdf]" in last:
        return "I read trip.pdf (2 pages) and kept it in your memory."
    return "OK."


async def main() -> None:
    embedder = LocalE5Embedder()
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "memgate.toml").write_text("")
        async with FakeLLM(responder) as llm, FakeTelegram() as tg:
            env = {"MEMGATE_CONFIG": str(Path(tmp) / "memgate.toml"), "MEMGATE_DATA_DIR": str(Path(tmp) / "data"),
                   "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
                   "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_OWNERS": f"telegram:{OWNER}",
                   "MEMGATE_SPEECH_MODEL": "whisper-1", "MEMGATE_SPEECH_API_BASE": llm.base_url,
                   "MEMGATE_MEDIA_VISION": "on"}
            settings = load_settings(None, env=env)

            def app():
                adapter = TelegramAdapter(tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url,
                                          poll_timeout=5, typing_interval=5, retry_delay=0.01)
                return build_app(settings, channels=[adapter], clock=clock.now, embedder=embedder)

            async def exchange(label: str, msg: dict) -> str:
                quoting = lambda: [s for s in tg.sent if (s.get("reply_parameters") or {}).get("message_id")  # noqa: E731
                                   == msg["message_id"]]
                await tg.wait_until(lambda: bool(quoting()), 60)
                answer = quoting()[0]["visible_text"]
                print(f"  person: {label}\n  memgate: {answer}\n")
                return answer

            pdf = tiny_pdf([["Lisbon trip", "Flight TP1234 leaves Friday at 9:40."],
                            ["Hotel: Casa do Rio, room 12.", "Dinner booked at Taberna da Rua, 20:00."]])
            print(f"## Day one ({clock.now():%Y-%m-%d %H:%M} UTC)\n")
            async with app() as first:
                turns: list = []
                first.gateway.on_turn = turns.append
                await exchange('[voice note, 4 s] "I fly to Lisbon on Friday, flight TP1234 at 9:40"', tg.inject_message(
                    OWNER, voice=True, duration=4, file_data=fake_audio("I fly to Lisbon on Friday, flight TP1234 at 9:40")))
                await exchange('[photo of a dog] "this is Rex"', tg.inject_message(
                    OWNER, photo=True, caption="this is Rex", file_data=tiny_png()))
                await exchange('[file trip.pdf, 2 pages] "keep my travel plan"', tg.inject_message(
                    OWNER, document="trip.pdf", mime_type="application/pdf", file_data=pdf, caption="keep my travel plan"))
                await first.gateway.idle()
                await first.engine.worker.drain()
            clock.advance(days=1)
            print(f"## Day two ({clock.now():%Y-%m-%d %H:%M} UTC), a new process and a new session\n")
            async with app() as second:
                for question, _ in DAY_TWO:
                    await exchange(question, tg.inject_message(OWNER, question))
                await second.gateway.idle()
                await second.engine.worker.drain()
                rows = second.store.read(lambda c: c.execute(
                    "SELECT kind, role, title, text, space_id FROM memories WHERE status = 'active' "
                    "AND created_at < ? ORDER BY created_at, kind, title", [clock.now().replace(tzinfo=None)]).fetchall())
            print("## The memory rows day one left (kind | role | title | text | space)\n")
            for kind, role, title, text, space in rows:
                flat = re.sub(r"\s+", " ", text)
                print(f"  {kind} | {role or ''} | {title} | {flat} | {space}")
            print("\n## What reading them cost\n")
            print(f"  speech-to-text calls: {len(llm.transcription_requests)} "
                  f"(model={llm.transcription_requests[0]['model']}, file={llm.transcription_requests[0]['file']['filename']}, "
                  f"{len(llm.transcription_requests[0]['file']['data'])} bytes)")
            voice_turn, photo_turn, pdf_turn = turns
            print(f"  LLM calls per turn: voice {voice_turn.llm_calls}, photo {photo_turn.llm_calls}, PDF {pdf_turn.llm_calls}"
                  " (the reply only: the photo's description rode on it)")
            print(f"  reply tokens (prompt/completion, as the fake server counts text): voice "
                  f"{voice_turn.prompt_tokens}/{voice_turn.completion_tokens}, photo "
                  f"{photo_turn.prompt_tokens}/{photo_turn.completion_tokens}, PDF {pdf_turn.prompt_tokens}/{pdf_turn.completion_tokens}")
            print(f"  extra prompt tokens for the description request: ~{estimate_tokens(prompts.DESCRIBE_IMAGES)}; "
                  f"extra completion tokens for the line: ~{estimate_tokens(f'[photo: {DESCRIPTION}]')}")
            print("  the PDF: 0 LLM calls to store it (pieces titled with the file name, embedded locally)")
            print(f"  downloads from the Bot API: {len(tg.downloads)} (one per attachment)")


if __name__ == "__main__":
    asyncio.run(main())
