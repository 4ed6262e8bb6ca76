"""Text handling: stripping injected context (idempotent, keeps the user's words), hashing,
tokens, redaction."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memory.redaction import redact
from memory.text import (
    MEMORY_CLOSE, MEMORY_OPEN, content_hash, has_cjk, neutralize, query_terms, strip_memory_context, tokenize,
)
from memory.prompts import MEMORY_BLOCK_HEADER

USER_TEXT = st.text(alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=200)


@given(before=USER_TEXT, inner=st.text(max_size=200), after=USER_TEXT)
def test_strip_is_idempotent_and_keeps_user_words(before, inner, after):
    body = neutralize(" ".join(inner.split()))
    text = f"{before}{MEMORY_OPEN}\n{MEMORY_BLOCK_HEADER}\n- {body}\n{MEMORY_CLOSE}\n{after}"
    once = strip_memory_context(text)
    assert strip_memory_context(once) == once
    assert MEMORY_OPEN not in once
    for word in (before + " " + after).split():
        assert word in once


def test_unclosed_block_is_removed_to_the_end():
    assert strip_memory_context(f"hello {MEMORY_OPEN}\n{MEMORY_BLOCK_HEADER}\n- remembered stuff") == "hello"


def test_hash_ignores_case_and_spacing():
    assert content_hash("I like  Jazz\r\n") == content_hash("i like jazz")
    assert content_hash("I like jazz") != content_hash("I like rock")


def test_tokens_mix_chinese_and_english():
    toks = tokenize("我对花生过敏, I'm allergic to PEANUTS")
    assert "花生" in toks and "过敏" in toks and "peanuts" in toks and "i'm" in toks
    assert has_cjk("abc 你好") and not has_cjk("abc")
    assert query_terms("What did Caroline do in May?") == ["caroline", "may"]


def test_redaction():
    text = ("key sk-proj-abcdefghijklmnopqrstuvwxyz1234 token: abcdef123456 Authorization: Bearer eyJabc.defghijklmnop.qrstuvwxyz "
            "password=hunter2 密码是 abc123 ghp_abcdefghijklmnopqrstuvwxyz0123456789 https://bob:s3cret@example.com")
    out = redact(text)
    for secret in ("sk-proj-abcdefghijklmnopqrstuvwxyz1234", "abcdef123456", "hunter2", "abc123", "s3cret",
                   "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "defghijklmnop"):
        assert secret not in out
    assert redact("I like my password manager") == "I like my password manager"


@given(st.text(max_size=300))
def test_redact_never_raises_and_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once
