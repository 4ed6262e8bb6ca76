"""Redaction: every common secret shape, in English and Chinese, is replaced; ordinary words never
are; redaction is idempotent; and a secret found once in a turn is scrubbed from all of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memory.redaction import find_secrets, redact

SECRETS = {
    "openai": ("my key is {}", "sk-" + "a1B2c3D4e5F6g7H8i9J0" * 2 + "abcdefgh"),
    "openai project": ("use {} please", "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2),
    "anthropic": ("ANTHROPIC_API_KEY {}", "sk-ant-api03-" + "x9Y8z7W6v5U4t3S2r1Q0" * 4 + "-AbCdEf"),
    "google": ("maps key {}", "AIzaSyD" + "4F6g8H0j2K4l6M8n0P2q4R6s8T0u2V4w"),
    "github classic": ("token {}", "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"),
    "github fine-grained": ("pat {}", "github_pat_11ABCDEFG0" + "_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ01"),
    "slack": ("bot {}", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    "stripe": ("stripe {}", "sk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr"),
    "huggingface": ("hub {}", "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    "telegram": ("bot token {}", "123456789:AAE" + "xYz0123456789AbCdEfGhIjKlMnOpQrS"),
    "aws id": ("id {}", "AKIAIOSFODNN7EXAMPLE"),
    "aws session id": ("id {}", "ASIAY34FZKBOKMUTVV7A"),
    "aws secret": ("aws_secret_access_key={}", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "env secret": ("export DB_PASSWORD={}", "pa55w0rd-prod"),
    "bearer": ("Authorization: Bearer {}", "abcdef1234567890abcdef"),
    "jwt": ("cookie {}", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    "private key": ("{}", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----"),
    "url credentials": ("connect to https://alice:{}@db.example.com/app", "Sup3rS3cret"),
    "password phrase": ("by the way my password is {}, don't tell", "hunter2"),
    "the password was": ("The password was {}.", "Tr0ub4dor&3"),
    "password colon": ("wifi password: {}", "correcthorsebattery"),
    "passcode": ("my passcode is {}", "8841"),
    "pin": ("my bank PIN is {}", "4921"),
    "chinese password": ("我的密码是{}，别告诉别人", "abc123456"),
    "chinese colon": ("密码：{}", "qwerty789"),
    "chinese koling": ("口令是 {}", "zhimakaimen"),
    "chinese wei": ("新密码为{}。", "Pa55word"),
    "plain word at the end": ("my wifi password is {}.", "sunshine"),
    "plain word before and": ("the password is {} and the name is Home", "lighthouse"),
    "mixed case word": ("password: {} (do not share)", "SunShine"),
    "quoted words": ('the passphrase is "{}" for the vault', "blue horse staple"),
}


def test_every_secret_shape_is_redacted():
    for name, (template, secret) in SECRETS.items():
        text = template.format(secret)
        out = redact(text)
        assert secret not in out, (name, out)
        assert "[REDACTED" in out, (name, out)
        assert secret in find_secrets(text) or any(secret in s for s in find_secrets(text)), (name, find_secrets(text))


def test_what_surrounds_a_secret_is_kept():
    assert redact("by the way my password is hunter2, don't tell") == "by the way my password is [REDACTED], don't tell"
    assert redact("我的密码是abc123456，别告诉别人") == "我的密码是[REDACTED]，别告诉别人"
    assert redact("connect to https://alice:pw12345@db.example.com/app") == "connect to https://alice:[REDACTED]@db.example.com/app"


INNOCENT = [
    "I like my password manager", "I reset my password yesterday", "the token ring network", "three tokens left",
    "密码学很有趣", "我忘了密码", "a secret garden", "the key to success", "ask Bob about the keynote", "sky-blue paint",
    "skiing in Haus im Ennstal", "api design review", "I passed the exam", "pinned message", "PIN codes are short",
]
WORDS = st.sampled_from(
    "I my the a password passwords token tokens secret key keys bearer pin code api access manager reset garden "
    "tomorrow Lyon coffee 12 2026 sk ghp hf aws 密码学 咖啡 明天 你好 猫 skill sky ask task mask".split())


def test_innocent_sentences_are_untouched():
    for text in INNOCENT:
        assert redact(text) == text and find_secrets(text) == []


@given(st.lists(WORDS, max_size=12).map(" ".join))
def test_ordinary_words_are_never_removed(text):
    assert redact(text) == text


@given(st.lists(st.one_of(st.sampled_from([t.format(s) for t, s in SECRETS.values()]), st.text(max_size=20)), max_size=5)
       .map(" ".join))
def test_redaction_is_idempotent_and_finds_nothing_twice(text):
    once = redact(text)
    assert redact(once) == once
    assert find_secrets(once) == []


# What people write after a secret's name that is not the secret: where it is, what it is like.
CUES = ["the office wifi password is", "My password is", "the PIN is", "the passcode for the door is", "secret:",
        "api_key:", "the password was", "Token:", "password ="]
PROSE_STARTS = ["on the", "in the", "under the", "at", "written on", "stored in", "taped under", "still the same as",
                "the same as", "wrong", "too short", "case sensitive", "somewhere in", "not", "12 characters", "8 digits",
                "different for", "expired since", "shared with", "in my", "with", "for"]
PLACES = st.sampled_from("fridge drawer desk router box note notebook card office kitchen Lyon Monday last year "
                         "the a my your it everyone guests staff door wall sticker".split())
ZH_CUES = ["密码是", "口令是", "wifi密码是", "密码："]
ZH_PROSE = st.sampled_from(["在冰箱上", "写在纸条上", "贴在路由器背面", "和以前一样", "我的生日", "在抽屉里的本子上", "问前台"])


def test_prose_after_a_secret_name_is_kept():
    for text in ["The office wifi password is on the fridge", "secret: the vault", "My password is wrong",
                 "The password is 12 characters long", "密码是在冰箱上的纸条上", "我住在上海，喜欢咖啡"]:
        assert redact(text) == text and find_secrets(text) == [], text


@given(st.sampled_from(CUES), st.sampled_from(PROSE_STARTS), st.lists(PLACES, max_size=6).map(" ".join),
       st.sampled_from(["", ".", "!", ", ok?"]))
def test_ordinary_sentences_after_a_secret_name_come_back_unchanged(cue, start, rest, end):
    text = f"{cue} {start} {rest}".rstrip() + end
    assert redact(text) == text
    assert find_secrets(text) == []


@given(st.sampled_from(ZH_CUES), ZH_PROSE, st.sampled_from(["", "。", "，别忘了"]))
def test_ordinary_chinese_after_a_secret_name_comes_back_unchanged(cue, prose, end):
    text = f"我家的{cue}{prose}{end}"
    assert redact(text) == text
