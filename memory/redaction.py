"""Secrets found and replaced before anything is stored or sent again: the patterns, what looks
like a secret after "password is" (and what is ordinary prose there), and `redact`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory.text import EN_STOPWORDS, has_cjk

# --- redaction -------------------------------------------------------------------------------
# Secrets are redacted at capture, before anything is stored or sent again (history, recall,
# ingest), and again before any text reaches the memory LLM. Each pattern names the secret part
# `s` (the whole match when it has none): what surrounds it ("my password is", the URL's host)
# stays, so the memory still says what the secret was for.
_PLACEHOLDER = re.compile(r"\[REDACTED[A-Z_]*\]")
# A value after "password is" / "密码：": quoted, or up to the next space or clause punctuation
# (a trailing full stop or comma belongs to the sentence, not the password).
_VALUE = (r"""(?P<s>\[REDACTED[A-Z_]*\]|"[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s"'，。；、！？,;]+?)"""
          r"""(?=[.,;:!?)\]}]*(?:\s|$)|[，。；、！？,;])""")
# The third field: True for a value found by the words before it ("password is X"), which must
# also look like a secret (`looks_like_secret`); the other patterns are secret shapes themselves.
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*\Z)", re.S), "[REDACTED_PRIVATE_KEY]", False),
    # OpenAI (sk-, sk-proj-, sk-svcacct-), Anthropic (sk-ant-api03-); a digit is required so that
    # "sk-learn-is-a-great-library" is not a key.
    (re.compile(r"\b(?:sk|pk|rk)-(?:proj-|ant-(?:[a-z]+\d+-)?|live-|test-|svcacct-|admin-)?(?=[A-Za-z_\-]*\d)[A-Za-z0-9_\-]{16,}"), "[REDACTED_KEY]", False),
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}"), "[REDACTED_KEY]", False),          # Stripe
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}"), "[REDACTED_KEY]", False),  # GitHub
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-\d-[A-Za-z0-9-]{10,}"), "[REDACTED_KEY]", False),  # Slack
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "[REDACTED_KEY]", False),                                   # Hugging Face
    (re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AGPA)[0-9A-Z]{16}\b"), "[REDACTED_KEY]", False),           # AWS key ids
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), "[REDACTED_KEY]", False),             # Google
    (re.compile(r"\b\d{8,10}:[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"), "[REDACTED_KEY]", False),          # Telegram bot token
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), "[REDACTED_JWT]", False),
    (re.compile(r"(?i)\bbearer\s+(?P<s>[A-Za-z0-9._~+/=-]{12,})"), "[REDACTED]", False),
    (re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@/]+)@"), "[REDACTED]", False),       # URL credentials
    # KEY=value and "key: value" for names that say secret: aws_secret_access_key, DB_PASSWORD, api-key.
    (re.compile(r"(?i)\b(?:[a-z0-9]+[_-])*(?:api[_-]?key|secret(?:[_-]?key)?|token|access[_-]?key|passwd|password|pwd"
                r"|client[_-]?secret|private[_-]?key)(?:[_-][a-z0-9]+)*\s*[:=]\s*" + _VALUE), "[REDACTED]", True),
    # What people type: "my password is X", "the PIN was 1234", "passcode for the door is X".
    (re.compile(r"(?i)\b(?:pass(?:word|phrase|code)|passwd|pin(?:\s+code)?)(?:\s+(?:for|of|to)\s+(?:the\s+|my\s+)?[\w.-]+)?"
                r"\s+(?:is|was|=)\s+" + _VALUE), "[REDACTED]", True),
    (re.compile(r"(?:密码|口令|密钥|令牌|暗号)\s*(?:是|为|:|：|=)\s*" + _VALUE), "[REDACTED]", True),
)
_MIN_SCRUB = 3  # shorter literals would scrub ordinary words elsewhere in the turn


# What follows "password is" / "secret:" in a sentence rather than a password: function words
# ("is on the fridge", "secret: the vault") and words that describe the password instead of being
# it ("is wrong", "was reset"). Only a letters-only value is judged by these words.
_PROSE_WORDS = EN_STOPWORDS | frozenset(
    """still same different written stored saved kept taped stuck printed noted listed shown given
    wrong right incorrect correct invalid valid expired changed reset required needed missing empty blank
    unknown new old long short weak strong simple easy hard secure insecure safe unsafe private public
    there here somewhere everywhere nowhere inside outside under underneath behind below above beside
    near next case sensitive protected encrypted hidden visible shared set none null default""".split())
# Words after a one-word value that end its clause ("is sunshine and ..."): the value stands alone.
_CLAUSE_JOINERS = frozenset("and but so or then because please ok okay btw thanks".split())
_LETTERS = re.compile(r"[^\W\d_]+")
_LENGTH_WORDS = frozenset("characters chars digits letters numbers symbols long".split())


def looks_like_secret(value: str, after: str = "") -> bool:
    """Whether a value found after "password is" / "token:" / "密码是" is the secret, not prose.

    A secret looks like a token: quoted on purpose, or with digits or symbols in it, or mixed case
    inside, or long (10+ letters: "correcthorsebattery"). A plain word is the secret only when it
    ends its clause ("my password is sunshine." / "... sunshine, don't tell" / "sunshine and ...")
    and is not a function word or a word that describes a password ("on the fridge", "wrong").
    A value of Chinese characters alone is prose ("密码是在冰箱上"): passwords are typed in ASCII.
    `after` is the text that follows the value."""
    if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) >= 2:
        return True
    if has_cjk(value) and not re.search(r"[A-Za-z0-9]", value):
        return False
    nxt = re.match(r"\s+([^\W\d_]+)", after)
    if value.isdigit() and nxt is not None and nxt.group(1).lower() in _LENGTH_WORDS:
        return False                     # "the password is 12 characters long"
    if not _LETTERS.fullmatch(value):
        return True                      # digits, symbols or a mix: hunter2, 8841, pa55w0rd-prod
    if value.lower() in _PROSE_WORDS:
        return False
    if any(c.isupper() for c in value[1:]) or len(value) >= 10:
        return True                      # SunShine, correcthorsebattery
    if nxt is None:
        return True                      # the end of the text or of its clause (",", ".", "，")
    return nxt.group(1).lower() in _CLAUSE_JOINERS


def _apply(text: str, found: list[str] | None) -> str:
    for pattern, placeholder, judged in _SECRET_PATTERNS:
        def repl(m: re.Match[str], placeholder: str = placeholder, judged: bool = judged) -> str:
            group = "s" if "s" in m.re.groupindex else 0
            secret = m.group(group)
            if _PLACEHOLDER.fullmatch(secret.strip("\"'")):
                return m.group(0)
            if judged and not looks_like_secret(secret, m.string[m.end():]):
                return m.group(0)
            if found is not None:
                found.append(secret.strip("\"'") if group == "s" else secret)
            start, end = m.span(group)
            return m.group(0)[: start - m.start()] + placeholder + m.group(0)[end - m.start():]

        text = pattern.sub(repl, text)
    return text


def find_secrets(text: str) -> list[str]:
    """The secret values in `text`, in order, without duplicates (placeholders are not secrets)."""
    found: list[str] = []
    _apply(text, found)
    return list(dict.fromkeys(found))


def redact(text: str, known: Sequence[str] = ()) -> str:
    """Replace API keys, tokens, passwords and private keys by placeholders.

    `known` are secrets already found elsewhere (the same turn's user message): their literal
    occurrences are scrubbed too, so an assistant that echoes "hunter2" does not store it.
    """
    text = _apply(text, None)
    for secret in sorted({k for k in known if len(k) >= _MIN_SCRUB}, key=len, reverse=True):
        text = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(secret) + r"(?![A-Za-z0-9_])", "[REDACTED]", text)
    return text


def redact_growing(text: str, known: Sequence[str] = ()) -> str:
    """What of a text still being written (a streamed reply) may be shown now, redacted.

    Shown text cannot be taken back, so nothing is shown that the finished text could still turn
    into a secret: the last word (no whitespace after it yet: "sk-ab" may become a key), an
    opening quote that a closing one would make a secret ('password is "blue horse ...': the line
    waits), and the start of a `known` secret at the end ("blue horse" of "blue horse staple").
    What is shown is `redact`ed like the finished text; it may redact more than the finished text
    will (a value judged without the words after it), never less."""
    end = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"), text.rfind("\u3000"))
    stable = text[: end + 1]
    shown = redact(stable, known)
    for quote in ('"', "'"):
        if redact(stable + quote, known) != shown + quote:
            stable = stable[: stable.rfind("\n") + 1]   # the rest of this line waits for the quote to close
            shown = redact(stable, known)
            break
    for secret in known:
        for i in range(min(len(secret) - 1, len(stable)), 0, -1):
            if stable.endswith(secret[:i]):
                stable = stable[: len(stable) - i]
                shown = redact(stable, known)
                break
    return shown.rstrip()
