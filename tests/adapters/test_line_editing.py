"""Tab completion of `/commands` (adapters/line_editing.py): only a single word after "/" is
completed, and only to commands that exist and start with what was typed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.line_editing import slash_completions

NAMES = st.lists(st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF, blacklist_characters="/"),
                         min_size=1, max_size=8), max_size=8)


@given(typed=st.text(max_size=12), names=NAMES)
def test_completions_extend_what_was_typed_to_a_known_command(typed, names):
    found = slash_completions(typed, names)
    assert found == sorted(set(found))
    for completion in found:
        assert completion[1:] in names and completion.lower().startswith(typed.lower())
    if not typed.startswith("/") or any(ch.isspace() for ch in typed):
        assert found == []          # a message, or a command's arguments: never completed


@given(names=NAMES)
def test_a_bare_slash_offers_every_command(names):
    assert slash_completions("/", names) == sorted({f"/{n}" for n in names})


def test_examples():
    names = ["help", "health", "forget", "quit"]
    assert slash_completions("/he", names) == ["/health", "/help"]
    assert slash_completions("/HEL", names) == ["/help"]
    assert slash_completions("/help me", names) == []
    assert slash_completions("he", names) == []
