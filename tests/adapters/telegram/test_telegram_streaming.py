"""Telegram shows a reply growing in one message while it is written (issue 30 item 5): the real
python-telegram-bot client against the fake Bot API, the real gateway and agent, the fake model
writing slowly. Each piece of the reply is written only once Telegram shows the one before (the
test waits on what the chat shows, never on a clock), so the message must grow edit by edit; the
fake refuses edits faster than one a second per chat (its own clock), as Telegram's flood control
does, and none is refused. The finished reply is whole, formatted, and the only message."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from adapters.split import split_message
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.draft import ChatPace
from adapters.telegram.format import markdown_to_plain
from bot.app import build_app
from bot.config import load_settings
from tests.fakes import brain
from tests.fakes.llm_server import Script, Streamed
from tests.fakes.telegram_api import FakeTelegram, utf16_len

pytestmark = pytest.mark.timeout(300)
USER = 7


def is_reply_request(req: dict) -> bool:
    return req["messages"][0]["content"].startswith("You are memgate")


def lockstep(tg: FakeTelegram, pieces: tuple[str, ...]) -> Streamed:
    """The pieces, each written once the chat shows the end of the one before."""
    async def hold(i: int) -> None:
        words = markdown_to_plain(pieces[i - 1]).split()[-1]   # as the chat shows it
        await tg.wait_until(lambda: any(words in text for text in tg.shown(USER)), 120)

    return Streamed(pieces, hold=hold)


@pytest.fixture
def running(tmp_path, fake_llm, clock, embedder) -> Callable[..., AsyncIterator[FakeTelegram]]:
    @asynccontextmanager
    async def run(answer: Callable[[FakeTelegram], Script]) -> AsyncIterator[FakeTelegram]:
        (tmp_path / "memgate.toml").write_text("")
        async with FakeTelegram() as tg:
            tg.edit_interval = 1.0
            fake_llm.responder = lambda req: answer(tg) if is_reply_request(req) else brain.respond(req)
            adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=5, typing_interval=0.5,
                                      retry_delay=0.01, stream_seconds=1.0)
            settings = load_settings(None, env={
                "MEMGATE_CONFIG": str(tmp_path / "memgate.toml"), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
                "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_MODEL": "fake-model",
                "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_OWNERS": f"telegram:{USER}"})
            app = build_app(settings, channels=[adapter], clock=clock.now, embedder=embedder)
            async with app:
                yield tg
                await app.gateway.idle()
                await app.engine.worker.drain()

    return run


PIECES = ("The dog is named Brindlequix. ", "He is a **whippet** ", "and he likes the sea, ", "the beach ",
          "and long walks.")


async def test_the_reply_grows_in_one_message_and_ends_whole(running):
    async with running(lambda tg: lockstep(tg, PIECES)) as tg:
        asked = tg.inject_message(USER, "tell me about my dog", first_name="Ann")
        final = markdown_to_plain("".join(PIECES))
        await tg.wait_until(lambda: tg.shown(USER) == [final], 120)
        mine = [s for s in tg.sent if s["chat_id"] == USER]
        assert len(mine) == 1 and mine[0]["reply_parameters"]["message_id"] == asked["message_id"]
        assert "likes the sea" not in mine[0]["visible_text"]         # it opened with the first words
        edits = [e for e in tg.edits if int(e["chat_id"]) == USER]
        grown = [mine[0]["visible_text"], *(e["visible_text"] for e in edits)]
        assert len(grown) >= len(PIECES)                               # it grew piece by piece...
        assert all(final.startswith(g) for g in grown) and grown[-1] == final   # ...and ends whole
        assert "**" not in final and "whippet" in final                # formatted as every reply
        assert tg.floods == 0                                          # never faster than Telegram allows
        assert all(b["at"] - a["at"] >= 1.0 for a, b in zip(edits, edits[1:]))


async def test_a_reply_past_4096_goes_on_in_a_new_message(running):
    paragraphs = tuple(" ".join(f"p{p}w{i}" for i in range(330)) + ".\n\n" for p in range(3))
    async with running(lambda tg: lockstep(tg, paragraphs)) as tg:
        tg.inject_message(USER, "a long story please", first_name="Ann")
        whole = "".join(paragraphs).strip()
        parts = split_message(whole, 4096, measure=utf16_len)
        assert len(parts) > 1
        await tg.wait_until(lambda: tg.shown(USER) == [markdown_to_plain(p) for p in parts], 120)
        assert len([s for s in tg.sent if s["chat_id"] == USER]) == len(parts)   # one message per part, each grown
        assert tg.floods == 0


async def test_a_reply_written_at_once_comes_whole_without_a_draft(running):
    async with running(lambda tg: "Rex is your dog's name, and he likes long walks by the sea.") as tg:
        tg.inject_message(USER, "what is my dog called?", first_name="Ann")
        await tg.wait_until(lambda: bool(tg.shown(USER)), 120)
        assert tg.shown(USER) == ["Rex is your dog's name, and he likes long walks by the sea."]
        assert not [e for e in tg.edits if int(e["chat_id"]) == USER]   # no fragment was ever shown


def test_a_group_is_paced_slower_than_a_private_chat():
    pace = ChatPace(1.0)
    assert pace.of(12345) == 1.0 and pace.of(-100123) == 3.0 and pace.of("@channel") == 3.0
