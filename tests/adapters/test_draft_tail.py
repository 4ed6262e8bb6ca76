"""A reply being written is drawn above the prompt as the terminal would wrap it (issue 30 item 5):
its last lines that fit, none wider than the screen, wide (CJK) characters counted as two."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prompt_toolkit.utils import get_cwidth

from adapters.line_editing import draft_tail

TEXT = st.text(st.sampled_from(list("ab cd.\n") + ["猫", "好", "🐕"]), max_size=400)


@given(TEXT, st.integers(1, 120), st.integers(1, 40))
def test_the_tail_fits_the_screen_and_ends_the_text(text, columns, rows):
    lines = draft_tail(text, columns, rows).split("\n")
    assert len(lines) <= rows
    assert all(sum(get_cwidth(c) for c in line) <= max(columns, 2) for line in lines)
    assert text.replace("\n", "").endswith("".join(lines))


def test_a_long_line_wraps_and_only_the_last_rows_show():
    assert draft_tail("abcdefghij", 4, 2) == "efgh\nij"
    assert draft_tail("猫猫猫", 4, 5) == "猫猫\n猫"
