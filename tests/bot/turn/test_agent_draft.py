"""What of a reply being written the agent hands on to be shown (issue 30 item 5): as the finished
reply will be, so the draft never shows what the reply then takes away. The picture descriptions a
model that sees writes first (kept in memory, not sent) are held back until written, and dropped;
a reply is shown no longer than max_reply_chars."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.turn.agent import Agent, AgentSettings, TurnRequest
from bot.turn.tools import ToolContext


def shown_by(agent: Agent, *, images: tuple[str, ...], writing: list[str]) -> list[str]:
    seen: list[str] = []
    req = TurnRequest(text="look", turn_id="t", session_id="s", history=(), channel="console", images=images,
                      ctx=ToolContext(space_ids=("u_ann",), write_space="u_ann"), on_text=seen.append)
    show = agent._shown_while_written(req)
    assert show is not None
    for text in writing:
        show(text)
    return seen


def agent(**settings) -> Agent:
    return Agent(None, None, None, AgentSettings(**settings), clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]


def test_picture_descriptions_are_never_shown():
    writing = ["[photo: a brown", "[photo: a brown dog on a beach]", "[photo: a brown dog on a beach]\nWhat a",
               "[photo: a brown dog on a beach]\nWhat a lovely dog!"]
    seen = shown_by(agent(), images=("data:image/png;base64,AAAA",), writing=writing)
    assert seen == ["What a", "What a lovely dog!"]


def test_without_pictures_the_text_is_shown_as_written_up_to_the_reply_limit():
    seen = shown_by(agent(max_reply_chars=500), images=(), writing=["[not a photo] hi", "x" * 600])
    assert seen == ["[not a photo] hi", "x" * 500]
