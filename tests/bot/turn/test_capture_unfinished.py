"""What the bot said is not what the person said (issue 32 item 5): a reply that failed, was
cancelled or was cut short reaches the person (or their apology does) but never memory, where it
would be recalled as something the bot said; the person's words are kept every time. Through the
real gateway, agent, litellm and DuckDB against the fake server."""

from __future__ import annotations

from bot.app import build_app
from bot.config import load_settings
from tests.bot.turn.test_history_roles import _env
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import CutShort, FakeError


async def _talk(tmp_path, clock, embedder, fake_llm, texts: list[str]) -> tuple[RecordingChannel, list[tuple[str, str]]]:
    """Olive says `texts` one after another on Telegram; what she was sent, and the (role, text) of
    the message chunks memory kept once ingest is done."""
    channel = RecordingChannel("telegram")
    async with build_app(load_settings(None, env=_env(tmp_path, fake_llm.base_url)), channels=[channel],
                         clock=clock.now, embedder=embedder) as app:
        for n, text in enumerate(texts, start=1):
            await channel.say("olive", text)
            await channel.wait_for(n, timeout=120)
            clock.advance(seconds=30)
        await app.gateway.idle()
        await app.engine.worker.drain()
        rows = app.store.read(lambda c: c.execute("SELECT role, text FROM memories WHERE kind = 'chunk' ORDER BY created_at, role DESC").fetchall())
    return channel, rows


async def test_a_reply_cut_at_the_token_limit_or_failed_is_not_stored_as_memory(tmp_path, clock, embedder, fake_llm):
    fake_llm.script("Rex is a fine name.", CutShort("Here are ten names for a cat: Mittens, Shadow, Lu"), FakeError(500, "slot busy"))
    channel, rows = await _talk(tmp_path, clock, embedder, fake_llm, ["My dog is called Rex.", "Name ten cats for me.", "And ten birds?"])
    assert channel.sent[1].text.startswith("Here are ten names for a cat")  # the person gets what came
    assert [r for r, _ in rows].count("assistant") == 1
    assert ("assistant", "Rex is a fine name.") in rows
    assert {t for r, t in rows if r == "user"} == {"My dog is called Rex.", "Name ten cats for me.", "And ten birds?"}


async def test_an_answer_with_nothing_to_read_is_told_as_such_and_not_stored(tmp_path, clock, embedder, fake_llm):
    # A small model can write blank lines up to its token limit: that was sent as '…' and kept as
    # what the bot said.
    fake_llm.script(CutShort("\n\n \n\n"), "  \n", "Rex is a fine name.")
    channel, rows = await _talk(tmp_path, clock, embedder, fake_llm, ["My dog is called Rex.", "Is that a good name?", "Really?"])
    assert all(m.text.strip() for m in channel.sent)
    assert [m.text.startswith("Sorry, my language model") and "nothing to read" in m.text for m in channel.sent] == [True, True, False]
    assert [t for r, t in rows if r == "assistant"] == ["Rex is a fine name."]
