"""split_message: limits, fences, order and cut preferences, over generated and hand-made texts."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from adapters.split import split_message

FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def utf8_len(s: str) -> int:
    return len(s.encode())


def fences(text: str) -> tuple[list[str], bool]:
    """The lines of `text` that are not fence lines, and whether the last fence is closed.

    Follows CommonMark: a fence opens with ``` or ~~~ (a backtick info string holds no backtick)
    and closes with the same character, at least as long, and no info string.
    """
    marker = None
    kept = []
    for line in text.split("\n"):
        m = FENCE_LINE.match(line)
        if marker is None and m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            marker = m.group(1)
        elif marker and m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) and not m.group(2).strip():
            marker = None
        else:
            kept.append(line)
    return kept, marker is None


def fence_balanced(part: str) -> bool:
    """True when every code fence opened in `part` is closed in it."""
    return fences(part)[1]


def essence(*texts: str) -> str:
    """The texts without their fence lines and whitespace: what a split must keep, in order."""
    return re.sub(r"\s+", "", "".join("".join(fences(t)[0]) for t in texts))


def fence_lines_fit(text: str, limit: int, measure=len) -> bool:
    """The splitter's precondition: a fence opener fits in a part beside its closing fence."""
    return all(measure(line) < limit // 2 for line in text.split("\n") if FENCE_LINE.match(line))


# -- generated texts -------------------------------------------------------------------------

no_surrogates = st.characters(blacklist_categories=("Cs",))
word = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12),
    st.text(alphabet="中文字符测试记忆网关", min_size=1, max_size=8),
    st.text(alphabet=no_surrogates, min_size=1, max_size=6).filter(lambda w: w.strip() == w and "\n" not in w),
    st.sampled_from(["😀", "👍🏽", "é", "e\u0301", "👨\u200d👩\u200d👧", "```", "~~~", "**bold**", "`x`"]),
)
punct = st.sampled_from(["", "", ".", "!", "?", "。", "！", "？", ","])
prose_line = st.lists(st.tuples(word, punct), min_size=1, max_size=25).map(
    lambda ws: " ".join(w + p for w, p in ws)
)
paragraph = st.lists(prose_line, min_size=1, max_size=4).map("\n".join)
code_line = st.one_of(
    st.text(alphabet="abcdef(){}=; _#\t", max_size=50),
    st.sampled_from(["    return x", "", "```python", "  ~~~", "````", "print('```')"]),
)


@st.composite
def code_block(draw: st.DrawFn) -> str:
    marker = draw(st.sampled_from(["```", "````", "~~~"]))
    lang = draw(st.sampled_from(["", "python", "js", "sh"]))
    body = draw(st.lists(code_line, max_size=25))
    closed = draw(st.booleans() | st.just(True))
    lines = [marker + lang, *body] + ([marker] if closed else [])
    return "\n".join(lines)


markdown = st.lists(st.one_of(paragraph, code_block()), min_size=1, max_size=8).map("\n\n".join)
any_text = st.one_of(markdown, st.text(alphabet=no_surrogates, max_size=600))
limits = st.integers(min_value=24, max_value=400)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=any_text, limit=limits)
def test_parts_fit_are_balanced_and_keep_the_text(text: str, limit: int) -> None:
    assume(fence_lines_fit(text, limit))
    parts = split_message(text, limit)
    assert all(len(p) <= limit for p in parts)
    assert all(p.strip() for p in parts)
    assert all(fence_balanced(p) for p in parts), parts
    assert essence(*parts) == essence(text)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=any_text, limit=st.integers(min_value=32, max_value=300))
def test_byte_measure_for_wechat(text: str, limit: int) -> None:
    assume(fence_lines_fit(text, limit, utf8_len))
    parts = split_message(text, limit, measure=utf8_len)
    assert all(utf8_len(p) <= limit for p in parts)
    assert all(fence_balanced(p) for p in parts)
    assert essence(*parts) == essence(text)


@settings(max_examples=200, deadline=None, database=None)
@given(text=st.lists(paragraph, min_size=1, max_size=6).map("\n\n".join), limit=limits)
def test_without_fences_each_part_is_a_slice_in_order(text: str, limit: int) -> None:
    assume(not any(FENCE_LINE.match(line) for line in text.split("\n")))
    parts = split_message(text, limit)
    pos = 0
    for part in parts:
        found = text.find(part, pos)
        assert found >= 0, (part, text[pos:])
        pos = found + len(part)


@settings(max_examples=100, deadline=None, database=None)
@given(text=any_text)
def test_balanced_text_that_fits_is_one_part(text: str) -> None:
    assume(fence_balanced(text))
    parts = split_message(text, max(len(text), 1))
    # Only leading blank lines and trailing whitespace are dropped.
    expected = re.sub(r"\A(?:[^\S\n]*\n)+", "", text).rstrip()
    assert parts == ([expected] if expected else [])


# -- preferences -----------------------------------------------------------------------------


def test_paragraph_before_line_before_sentence_before_word() -> None:
    para = "First paragraph line one.\nFirst paragraph line two."
    text = para + "\n\n" + "Second paragraph is here."
    assert split_message(text, len(para) + 5) == [para, "Second paragraph is here."]

    lines = "alpha beta gamma.\ndelta epsilon zeta"
    assert split_message(lines, 24) == ["alpha beta gamma.", "delta epsilon zeta"]

    sentences = "One two three. Four five six seven"
    assert split_message(sentences, 20) == ["One two three.", "Four five six seven"]

    words = "one two three four five six"
    assert split_message(words, 14) == ["one two three", "four five six"]


def test_hard_cut_when_there_is_no_space() -> None:
    assert split_message("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_cjk_sentences_split_at_full_stops() -> None:
    text = "今天天气很好。我们去公园散步吧！你觉得怎么样？"
    assert split_message(text, 10) == ["今天天气很好。", "我们去公园散步吧！", "你觉得怎么样？"]


def test_code_block_moves_whole_to_the_next_part() -> None:
    intro = "Here is the code:"
    code = "```python\nprint('hi')\nprint('there')\n```"
    parts = split_message(intro + "\n\n" + code + "\n\nThat is all.", 60)
    assert parts[0] == intro
    assert code in parts[1]


def test_long_code_block_is_closed_and_reopened_with_its_language() -> None:
    code_lines = [f"value_{i} = {i} * 2" for i in range(30)]
    text = "```python\n" + "\n".join(code_lines) + "\n```"
    parts = split_message(text, 120)
    assert len(parts) > 1
    for part in parts:
        assert part.startswith("```python\n")
        assert part.endswith("\n```")
        assert len(part) <= 120
    body = [line for part in parts for line in part.split("\n")[1:-1]]
    assert body == code_lines


def test_tilde_fence_and_longer_marker_are_reused() -> None:
    text = "~~~~sh\n" + "\n".join(f"echo {i}" for i in range(20)) + "\n~~~~"
    parts = split_message(text, 50)
    assert all(p.startswith("~~~~sh\n") and p.endswith("\n~~~~") for p in parts)


def test_unclosed_fence_is_closed_in_the_last_part() -> None:
    parts = split_message("text\n\n```js\nlet a = 1;", 200)
    assert parts == ["text\n\n```js\nlet a = 1;\n```"]


def test_utf8_byte_limit_never_splits_a_character() -> None:
    text = "记忆" * 1500
    parts = split_message(text, 2048, measure=utf8_len)
    assert all(utf8_len(p) <= 2048 for p in parts)
    assert "".join(parts) == text


def test_emoji_sequence_is_not_split_by_a_hard_cut() -> None:
    family = "👨\u200d👩\u200d👧"
    parts = split_message(family * 10, 7)
    assert "".join(parts) == family * 10
    assert all(not p.startswith("\u200d") and not p.endswith("\u200d") for p in parts)


def test_empty_and_blank_text_give_no_parts() -> None:
    assert split_message("", 10) == []
    assert split_message(" \n\n\t", 10) == []


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        split_message("abc", 0)


def test_long_reply_of_telegram_size() -> None:
    chunk = "Some prose here. " * 40 + "\n\n```python\n" + "\n".join(f"x{i} = {i}" for i in range(120)) + "\n```\n\n"
    text = chunk * 5
    parts = split_message(text, 4096)
    assert len(parts) >= 2
    assert all(len(p) <= 4096 and fence_balanced(p) for p in parts)
    assert essence(*parts) == essence(text)
