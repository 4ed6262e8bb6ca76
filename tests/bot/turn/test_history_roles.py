"""History the model can take (issue 30 item 4).

Found with llama.cpp: after a reply failed and the person sent their message again, the model got
the same `user` message three times in a row; chat templates that insist on alternating roles
reject that. A failed or cancelled turn keeps the person's words (captured without an answer), so
the history is shaped when the prompt is built: one user message per run, a repeat said once,
roles alternating from a user message on. Through the real gateway, agent, litellm and DuckDB
against the fake server, and as a property of `alternating` over any sequence of turn outcomes.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bot.app import build_app
from bot.config import load_settings
from bot.turn.sessions import alternating
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import FakeError

QUESTION = "What is my dog called?"


def _env(tmp_path: Path, base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))}
    (tmp_path / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_CONFIG": str(tmp_path / "none.toml"),
                "MEMGATE_LLM_API_BASE": base, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
                "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_LLM_MEMORY_LLM": "false",
                "MEMGATE_ACCESS_OWNERS": "telegram:olive", "MEMGATE_ACCESS_DM_POLICY": "open"})
    return env


def _chat_roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages if m["role"] != "system"]


async def test_a_turn_that_failed_twice_reaches_the_model_once_with_roles_alternating(tmp_path, clock, embedder, fake_llm):
    fake_llm.script("Rex is a fine name.", FakeError(500, "slot busy"), FakeError(500, "slot busy"), "Your dog is Rex.")
    channel = RecordingChannel("telegram")
    async with build_app(load_settings(None, env=_env(tmp_path, fake_llm.base_url)), channels=[channel],
                         clock=clock.now, embedder=embedder) as app:
        for n, text in enumerate(["My dog is called Rex.", QUESTION, QUESTION, QUESTION], start=1):
            await channel.say("olive", text)
            await channel.wait_for(n, timeout=120)
            clock.advance(seconds=30)
        await app.gateway.idle()
    assert channel.sent[-1].text == "Your dog is Rex."
    last = fake_llm.requests[-1]["messages"]
    assert _chat_roles(last) == ["user", "assistant", "user"]
    said = [m["content"] for m in last if m["role"] == "user"]
    assert said == ["My dog is called Rex.", QUESTION]      # the retried question once, not three times


async def test_what_a_failed_turn_said_goes_with_the_next_message(tmp_path, clock, embedder, fake_llm):
    fake_llm.script(FakeError(500, "slot busy"), "Noted both.")
    channel = RecordingChannel("telegram")
    async with build_app(load_settings(None, env=_env(tmp_path, fake_llm.base_url)), channels=[channel],
                         clock=clock.now, embedder=embedder) as app:
        for n, text in enumerate(["My dog is called Rex.", "Did you get that?"], start=1):
            await channel.say("olive", text)
            await channel.wait_for(n, timeout=120)
            clock.advance(seconds=30)
        await app.gateway.idle()
    last = fake_llm.requests[-1]["messages"]
    assert _chat_roles(last) == ["user"]
    assert last[-1]["content"] == "My dog is called Rex.\n\nDid you get that?"


TEXTS = ["hi", "my dog is Rex", "what is my dog called?", "  what is my dog called?  "]
turns = st.lists(st.tuples(st.sampled_from(TEXTS), st.sampled_from(["answered", "failed", "cancelled", "reply only"])),
                 max_size=12)


def _history(outcomes: list[tuple[str, str]]) -> list[dict]:
    """What Sessions.history reads back: each turn's user words (kept whatever happened) and the
    answer of an answered turn; "reply only" is a turn that holds only the assistant's words (an
    API client storing messages in this session)."""
    out: list[dict] = []
    for i, (text, outcome) in enumerate(outcomes):
        if outcome != "reply only":
            out.append({"role": "user", "content": text})
        if outcome in ("answered", "reply only"):
            out.append({"role": "assistant", "content": f"answer {i}"})
    return out


@given(outcomes=turns, now=st.sampled_from(TEXTS))
def test_roles_alternate_from_a_user_message_whatever_the_turns_did(outcomes, now):
    history, text = alternating(_history(outcomes), now)
    roles = [m["role"] for m in history] + ["user"]
    assert roles[0] == "user"
    assert all(a != b for a, b in zip(roles, roles[1:]))       # alternating, ending with the message now
    # What the person said since the last answer is sent once: no paragraph twice, `now` last.
    paragraphs = text.split("\n\n")
    assert paragraphs[-1] == now and len({p.strip() for p in paragraphs}) == len(paragraphs)
    # Nothing they said is lost: every unanswered word since the last answer is in the message now.
    tail = []
    for said, outcome in outcomes:
        tail = [] if outcome in ("answered", "reply only") else tail + [said.strip()]
    assert set(tail) <= {p.strip() for p in paragraphs}
    # Every answer after the person's first message is kept.
    answers = [m["content"] for m in _history(outcomes) if m["role"] == "assistant"]
    kept = "\n\n".join(m["content"] for m in history if m["role"] == "assistant")
    first_user = next((i for i, (_, o) in enumerate(outcomes) if o != "reply only"), None)
    for i, (_, outcome) in enumerate(outcomes):
        if outcome in ("answered", "reply only") and first_user is not None and i >= first_user:
            assert f"answer {i}" in kept
    assert len(answers) >= kept.count("answer ")
