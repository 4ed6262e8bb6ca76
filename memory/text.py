"""Text handling shared by ingest and recall: normalisation, hashing, tokens, CJK, redaction.

Tokenisation: Latin text is split by a regex and lowercased; CJK runs go through jieba's
`cut_for_search`, loaded lazily (its dictionary takes ~1.5 s) with its cache in the data folder.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Sequence

from memory.prompts import MEMORY_BLOCK_HEADER, NO_MEMORY_HINT
from memory.segmenter import jieba_tokenizer, set_jieba_cache_dir  # noqa: F401 (set_jieba_cache_dir: the engine sets it)

log = logging.getLogger(__name__)

MEMORY_OPEN = "<memory-context>"
MEMORY_CLOSE = "</memory-context>"

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_SPACES = re.compile(r"[ \t\u00a0\u3000]+")

# A small, deliberate English stopword list: BM25 over LoCoMo finds 65.8% of the evidence in the
# top 10 when the query drops these, against 53.8% when it keeps every word (DESIGN section 9).
EN_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves s t don ll ve re d m
    o y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
    weren won wouldn also ever get got let lets like might must one shall us via yes yet
    did does kind sort thing things something anything""".split()
)
ZH_STOPWORDS = frozenset(
    "的 了 和 是 就 都 而 及 与 着 或 一个 没有 我们 你们 他们 她们 是否 吗 呢 吧 啊 呀 么 什么 怎么 "
    "哪 哪里 哪个 这 那 这个 那个 在 也 有 被 把 给 让 从 向 对 于 上 下 中 里 之 为 以 其 "
    "还 又 很 太 更 最 过 去 来 会 能 要 想 说 请 一下 一些 吗 嗯 哦".split()
)
# Chinese question words, particles and asking phrases: they carry the asking, not what is asked
# about, and a stored statement never holds them ("几个" / "哪些" / "来着" / "请问"). Matched as
# whole jieba tokens only, so a word that merely contains one (吗啡, 呢子大衣) is kept.
ZH_QUESTION_WORDS = frozenset(
    "什么 啥 怎么 怎样 怎么样 如何 为什么 为何 哪 哪些 哪个 哪里 哪儿 哪几 哪几个 哪家 哪几家 哪位 哪种 "
    "几 几个 几家 几次 几种 几位 几天 多少 多少次 多少个 多久 是不是 有没有 是否 能不能 可不可以 会不会 "
    "吗 呢 吧 啊 呀 哇 嘛 么 啦 哈 嗯 哦 噢 喔 诶 哎 来着 请问 问问 问一下 一下 告诉 告诉我 知道 想知道 "
    "记得 还记得 记不记得 帮 帮忙 麻烦 一共 总共 共 都 还".split()
)
STOPWORDS = EN_STOPWORDS | ZH_STOPWORDS
QUERY_STOPWORDS = STOPWORDS | ZH_QUESTION_WORDS


def normalize(text: str) -> str:
    """The text as it is stored: unified newlines, collapsed runs of spaces, trimmed lines and ends.

    Characters are kept as written (a Chinese full-width comma stays one): folding them is the
    indexes' business (`fold_for_index`, `tokenize`), never the stored text's."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def fold_for_index(text: str) -> str:
    """What the indexes see of a text: NFKC-folded (full-width Latin, digits and punctuation as
    ASCII, compatibility forms unified), so "ＡＢＣ，１２" and "ABC,12" are found alike."""
    return unicodedata.normalize("NFKC", text)


def content_hash(text: str) -> str:
    """SHA-256 of the normalised, NFKC-folded and case-folded text: the exact-duplicate key."""
    return hashlib.sha256(normalize(fold_for_index(text)).casefold().encode("utf-8")).hexdigest()


def has_cjk(text: str) -> bool:
    """True when the text holds Chinese, Japanese or Korean characters."""
    return _CJK.search(text) is not None


# Our own blocks start with our exact opening tag and one of our exact header lines: only those
# are stripped, so a person who writes a lone "<memory-context>" keeps every word after it.
_OUR_BLOCK = re.compile(
    re.escape(MEMORY_OPEN) + r"[ \t]*\n[ \t]*(?:" + "|".join(
        re.escape(h) for h in (MEMORY_BLOCK_HEADER, NO_MEMORY_HINT.split("\n")[1].split(". ")[0])
    ) + r").*?(?:" + re.escape(MEMORY_CLOSE) + r"|\Z)[ \t]*\n?",
    re.DOTALL,
)


def strip_memory_context(text: str) -> str:
    """Remove the <memory-context> blocks we injected (idempotent; the person's words are kept).

    A block is ours when it starts with our opening tag and our exact header line; a truncated
    echo of one is removed to the end, because everything after our header was written by us.
    Anything else that looks like a tag is the person's text and stays.
    """
    return _OUR_BLOCK.sub("", text.replace("\r\n", "\n")).strip()


# --- prompt safety ------------------------------------------------------------------------------
# What could open or close one of our blocks or forge a role in a chat template, matched in a view
# of the text that is NFKC-normalised, casefolded and without invisible marks, so "＜/ＭＥＭＯＲＹ-
# context＞" or "</memory\u200b-context>" are caught like the plain tag.
_FORGERY = re.compile(
    r"<\s*/?\s*memory[\s_-]*context\b(?:[^<>\n]{0,80}>)?"       # our block tags, with or without '>'
    r"|<\s*/?\s*(?:s|system|user|assistant|im_start|im_end|start_of_turn|end_of_turn|bos|eos|eot)\s*>"
    r"|<<\s*/?\s*sys\s*>>"                                      # Llama 2 system markers
    r"|\[\s*/?\s*inst\s*\]"                                      # Llama 2 / Mistral turn markers
    r"|<\||\|>"                                                 # <|im_start|>, <|eot_id|>, ...
)
# Replacements that NFKC leaves alone (full-width brackets would turn back into ASCII).
_DEFANG = str.maketrans({"<": "‹", ">": "›", "[": "(", "]": ")"})
_BRACKETS = frozenset("<>[|")


def _folded_view(text: str) -> tuple[str, list[int]]:
    """NFKC + casefold per character, invisible marks dropped; and the source index of each char."""
    out: list[str] = []
    owner: list[int] = []
    for i, ch in enumerate(text):
        for c in unicodedata.normalize("NFKC", ch).casefold():
            if unicodedata.category(c) not in ("Cf", "Mn"):
                out.append(c)
                owner.append(i)
    return "".join(out), owner


def _defang_once(text: str) -> str:
    folded, owner = _folded_view(text)
    parts: list[str] = []
    pos = 0
    for m in _FORGERY.finditer(folded):
        start, end = owner[m.start()], owner[m.end() - 1] + 1
        if start < pos:
            continue
        # The replacement is the folded form of the whole source characters the match covers.
        lo = owner.index(start)
        hi = len(owner) - owner[::-1].index(end - 1)
        parts += [text[pos:start], folded[lo:hi].translate(_DEFANG)]
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def neutralize(text: str) -> str:
    """Text that can sit in a prompt without opening or closing our blocks or forging a role.

    Only the dangerous spans change (their brackets become ‹ › ( )); everything else is kept as
    written. Stable: neutralize(neutralize(x)) == neutralize(x).
    """
    if not (_BRACKETS & set(text if text.isascii() else unicodedata.normalize("NFKC", text))):
        return text
    while True:
        out = _defang_once(text)
        if out == text:
            return out
        text = out


def render_name(name: str | None, limit: int = 64) -> str:
    """A display name as one safe line: control and line-break characters collapsed to spaces."""
    if not name:
        return ""
    flat = "".join(" " if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") else c
                   for c in name)
    out = " ".join(neutralize(flat).split())
    if len(out) > limit:
        out = " ".join(neutralize(out[:limit]).split())[:limit].rstrip()
    return out


_ZH_DIGIT = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_POWER = {"十": 10, "百": 100, "千": 1000}
_ZH_NUMERAL_RUN = re.compile(r"[零〇一二两三四五六七八九十百千万]+")
# What a number counts: a Chinese numeral run followed by one of these is a number (三次, 九百块,
# 两个月); one that is not (三里屯, 一起, 万一, 星期三) is left alone, because it is part of a word.
_ZH_UNITS = frozenset("月日号年点个块元次岁天周分秒斤公米本只位家件张层楼条份场部台辆间盒瓶杯碗")


def _zh_int(run: str) -> int | None:
    """The value of a Chinese numeral ("九百" 900, "二十三" 23, "一万五千" 15000, "二〇二四" 2024),
    None when the run is not a well-formed number (万一, 千万, 十十)."""
    if all(c in _ZH_DIGIT for c in run):
        if len(run) > 1 and "两" in run:
            return None
        return int("".join(str(_ZH_DIGIT[c]) for c in run))
    total, section, digit = 0, 0, None
    for i, c in enumerate(run):
        if c in _ZH_DIGIT:
            if digit is not None and not (run[i - 1] in "零〇"):
                return None
            digit = _ZH_DIGIT[c]
        elif c in _ZH_POWER:
            if digit is None and not (c == "十" and i == 0 and section == 0 and total == 0):
                return None
            section += (1 if digit is None else digit) * _ZH_POWER[c]
            digit = None
        else:  # 万
            if digit is None and section == 0:
                return None
            total += (section + (digit or 0)) * 10000
            section, digit = 0, None
    return total + section + (digit or 0)


def normalize_numbers(text: str) -> str:
    """Chinese numerals that count something as Arabic digits (九百块 -> 900块, 四月五日 -> 4月5日,
    two-script numbers match in BM25); numeral runs inside words are kept. Idempotent."""

    def repl(m: re.Match[str]) -> str:
        run, after = m.group(), text[m.end(): m.end() + 1]
        positional = any(c in "十百千万" for c in run)
        if after in _ZH_UNITS or (positional and len(run) > 1):
            value = _zh_int(run)
            if value is not None:
                return str(value)
        return run

    return _ZH_NUMERAL_RUN.sub(repl, text)


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
# 4月5日 / 4月5号 / 4月 -> "april 5": the English month name the index's date words use.
_ZH_DATE = re.compile(r"(?<![\d个])(1[0-2]|0?[1-9])\s*月(?:份)?(?:\s*(3[01]|[12]\d|0?[1-9])\s*[日号])?")
_ZH_YEAR = re.compile(r"(\d{4})\s*年")


def _dates_in_words(text: str) -> str:
    text = _ZH_YEAR.sub(r" \1 ", text)
    return _ZH_DATE.sub(lambda m: f" {_MONTHS[int(m.group(1)) - 1]} {int(m.group(2)) if m.group(2) else ''} ", text)


def cjk_bigrams(run: str) -> list[str]:
    """The overlapping character pairs of a CJK run (阿里巴巴 -> 阿里 里巴 巴巴)."""
    return [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str, *, numbers: bool = True, bigrams: bool = False) -> list[str]:
    """Search tokens: lowercased words, numbers in Arabic digits and Chinese dates as English
    month words; CJK runs segmented by jieba's cut_for_search. `numbers=False` keeps numerals
    and dates as written (the bench's ablation of the normalisation); `bigrams` adds each CJK
    run's character pairs that jieba did not already give (a name jieba cuts differently in
    the question and in the memory still shares its pairs)."""
    out: list[str] = []
    pos = 0
    lowered = unicodedata.normalize("NFKC", text).lower()
    if numbers:
        lowered = _dates_in_words(normalize_numbers(lowered))
    for m in _CJK_RUN.finditer(lowered):
        out.extend(_WORD.findall(lowered[pos : m.start()]))
        words = [t for t in jieba_tokenizer().cut_for_search(m.group()) if t.strip()]
        out.extend(words)
        if bigrams:
            out.extend(b for b in cjk_bigrams(m.group()) if b not in words)
        pos = m.end()
    out.extend(_WORD.findall(lowered[pos:]))
    return [t.replace("’", "'") for t in out]


def search_text(text: str, *, numbers: bool = True, bigrams: bool = False) -> str:
    """The space-joined tokens the FTS index sees (it splits on whitespace only)."""
    return " ".join(tokenize(text, numbers=numbers, bigrams=bigrams))


def query_terms(text: str, *, question_words: bool = True, numbers: bool = True, bigrams: bool = False) -> list[str]:
    """Query tokens without stopwords, deduplicated in order; all tokens if every one is a stopword.
    `question_words=False` keeps the Chinese question words (the bench's ablation); `bigrams`
    adds the character pairs of the CJK spans left between stopwords and question words (a
    pair across a question word would bring the asking back)."""
    toks = tokenize(text, numbers=numbers)
    stop = QUERY_STOPWORDS if question_words else STOPWORDS
    kept = [t for t in toks if t not in stop and not (len(t) == 1 and t.isascii())]
    if bigrams:
        # A pair can spell a question word inside a word jieba did not split (一下一下): dropped too.
        kept += [b for span in _content_spans(text, stop, numbers) for b in cjk_bigrams(span) if b not in stop]
    return list(dict.fromkeys(kept or toks))


def _content_spans(text: str, stop: frozenset[str], numbers: bool) -> list[str]:
    """The CJK stretches of a query between its stopwords, as jieba's precise mode cuts them."""
    lowered = unicodedata.normalize("NFKC", text).lower()
    if numbers:
        lowered = _dates_in_words(normalize_numbers(lowered))
    spans: list[str] = []
    for m in _CJK_RUN.finditer(lowered):
        cur = ""
        for w in jieba_tokenizer().lcut(m.group()):
            if w in stop:
                spans.append(cur)
                cur = ""
            else:
                cur += w
        spans.append(cur)
    return [x for x in spans if len(x) >= 2]


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: ~4 Latin characters or ~1.5 CJK characters per token."""
    cjk = len(_CJK.findall(text))
    return int(cjk / 1.5 + (len(text) - cjk) / 4) + 1


def trim(text: str, limit: int) -> str:
    """Cut to `limit` characters at a word boundary, with an ellipsis when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if not has_cjk(cut) and " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,.;:") + "…"


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
