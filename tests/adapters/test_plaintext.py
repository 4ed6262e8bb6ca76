"""markdown_to_plain: Markdown that WeChat would show raw becomes readable plain text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.plaintext import BULLET, RULE_TEXT, markdown_to_plain


def _alnum(text: str) -> list[str]:
    return [c for c in text if c.isalnum()]


def test_headings_lose_their_hashes() -> None:
    assert markdown_to_plain("# Title\n## Sub title ##\n###### six") == "Title\nSub title\nsix"


def test_hash_without_space_is_not_a_heading() -> None:
    assert markdown_to_plain("#hashtag and C#") == "#hashtag and C#"


def test_setext_underlines_are_dropped() -> None:
    assert markdown_to_plain("Title\n=====\nSub\n---\nbody") == "Title\nSub\nbody"


def test_emphasis_markers_are_removed() -> None:
    text = "a **bold** b *it* c __strong__ d _em_ e ~~gone~~ f ***both***"
    assert markdown_to_plain(text) == "a bold b it c strong d em e gone f both"


def test_underscores_inside_words_stay() -> None:
    assert markdown_to_plain("call snake_case_name and a__b__c now") == "call snake_case_name and a__b__c now"


def test_lone_stars_stay() -> None:
    assert markdown_to_plain("2 * 3 * 4 = 24") == "2 * 3 * 4 = 24"


def test_links_show_text_and_url() -> None:
    assert markdown_to_plain("see [the docs](https://x.org/a_b) now") == "see the docs (https://x.org/a_b) now"
    assert markdown_to_plain("![a cat](http://i.example/cat.png)") == "a cat (http://i.example/cat.png)"
    assert markdown_to_plain("<https://x.org>") == "https://x.org"
    assert markdown_to_plain("[](https://x.org)") == "https://x.org"


def test_code_fence_is_removed_and_code_kept_verbatim() -> None:
    text = "Run:\n```python\nx = **not bold** # not a heading\n- not a bullet\n```\ndone"
    assert markdown_to_plain(text) == "Run:\n[python]\nx = **not bold** # not a heading\n- not a bullet\ndone"


def test_fence_without_language_leaves_no_trace() -> None:
    assert markdown_to_plain("```\ncode\n```") == "code"


def test_unclosed_fence_keeps_the_rest_verbatim() -> None:
    assert markdown_to_plain("```\n# kept\n**kept**") == "# kept\n**kept**"


def test_tilde_fence_closes_only_on_tildes() -> None:
    assert markdown_to_plain("~~~\n```\ninner\n~~~\n*x*") == "```\ninner\nx"


def test_inline_code_loses_backticks_but_not_its_content() -> None:
    assert markdown_to_plain("use `**x**` or ``a ` b``") == "use **x** or a ` b"


def test_escapes_are_resolved_not_formatted() -> None:
    assert markdown_to_plain(r"\*not italic\* and \_no\_") == "*not italic* and _no_"


def test_lists_are_kept() -> None:
    text = "- one\n* two\n  + nested\n1. first\n2) second"
    assert markdown_to_plain(text) == f"{BULLET}one\n{BULLET}two\n  {BULLET}nested\n1. first\n2) second"


def test_quotes_and_rules() -> None:
    assert markdown_to_plain("> **quoted**\n\n***\n- - -") == f"> quoted\n\n{RULE_TEXT}\n{RULE_TEXT}"


def test_tables_lose_separator_and_outer_pipes() -> None:
    text = "| name | value |\n|------|:-----:|\n| `a|b` | **2** |"
    assert markdown_to_plain(text) == "name | value\na|b | 2"


def test_plain_text_and_chinese_pass_through() -> None:
    text = "你好，世界！今天天气不错。\n\nSecond paragraph."
    assert markdown_to_plain(text) == text


_TOKENS = st.one_of(
    st.sampled_from(list("#*_`~[]()!<>|-+=:\\ \n\t.1aZ")),
    st.sampled_from(["```", "~~~", "**", "](", "http://x.y", "\n```py\n", "> ", "- ", "| ", "|---|"]),
    st.characters(codec="utf-8"),
)
_MARKDOWNISH = st.lists(_TOKENS, max_size=120).map("".join)


@settings(max_examples=400, deadline=None)
@given(_MARKDOWNISH)
def test_never_raises_and_keeps_every_letter_and_digit_in_order(text: str) -> None:
    plain = markdown_to_plain(text)
    assert isinstance(plain, str)
    assert _alnum(plain) == _alnum(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="#*_`~[]()!<>|-+=\\"), max_size=200))
def test_text_without_markup_characters_is_unchanged_up_to_trailing_spaces(text: str) -> None:
    expected = "\n".join(line.rstrip() for line in text.split("\n"))
    assert markdown_to_plain(text) == expected
