"""Text handling shared by ingest and recall: normalisation, hashing, tokens, CJK, prompt safety.
Redaction (secrets found and replaced) is memory/redaction.py.

Tokenisation: Latin text is split by a regex and lowercased; CJK runs go through jieba's
`cut_for_search`, loaded lazily (its dictionary takes ~1.5 s) with its cache in the data folder.
"""

from __future__ import annotations

import bisect
import hashlib
import html
import logging
import re
import unicodedata

from memory.prompts import FRAME_TAGS, MEMORY_BLOCK_HEADER, NO_MEMORY_HINT
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
# What could open or close one of our frames (prompts.FRAME_TAGS: the memory block, a document) or
# forge a role in a chat template. It is matched in a view of the text where HTML entities are
# decoded and every character is NFKC-normalised and casefolded with invisible marks dropped, so
# "</DOCUMENT >", "＜/ｍｅｍｏｒｙ-context＞", "</memory\u200b-context>" or "&lt;/document&gt;" are
# caught like the plain tag: a model reads them alike.
_FRAME_NAMES = "|".join(re.escape(tag).replace(r"\-", r"[\s_-]*") for tag in FRAME_TAGS)
_FORGERY = re.compile(
    r"<\s*/?\s*(?:" + _FRAME_NAMES + r")\b(?:[^<>\n]{0,80}>)?"   # our frames' tags, any attributes, '>' or not
    r"|<\s*/?\s*(?:s|system|user|assistant|im_start|im_end|start_of_turn|end_of_turn|bos|eos|eot)\s*>"
    r"|<<\s*/?\s*sys\s*>>"                                      # Llama 2 system markers
    r"|\[\s*/?\s*inst\s*\]"                                      # Llama 2 / Mistral turn markers
    r"|<\||\|>"                                                 # <|im_start|>, <|eot_id|>, ...
)
# An HTML character reference as html.unescape reads it (named, decimal, hex; ';' optional).
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?")
# Replacements that NFKC leaves alone (full-width brackets would turn back into ASCII).
_DEFANG = str.maketrans({"<": "‹", ">": "›", "[": "(", "]": ")"})
_BRACKETS = frozenset("<>[|&")
_INVISIBLE = ("Cf", "Mn")


def _folded_view(text: str) -> tuple[str, list[int], list[int]]:
    """The text as a model may read it (entities decoded; NFKC + casefold per character, invisible
    marks dropped), and for each of its characters the span [start, end) of source it came from."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos, n = 0, len(text)
    while pos < n:
        piece, end = text[pos], pos + 1
        if piece == "&" and (m := _ENTITY.match(text, pos)) and (decoded := html.unescape(m.group())) != m.group():
            piece, end = decoded, m.end()
        for ch in piece:
            for c in unicodedata.normalize("NFKC", ch).casefold():
                if unicodedata.category(c) not in _INVISIBLE:
                    out.append(c)
                    starts.append(pos)
                    ends.append(end)
        pos = end
    return "".join(out), starts, ends


def _defang_once(text: str) -> str:
    folded, starts, ends = _folded_view(text)
    parts: list[str] = []
    pos = 0
    for m in _FORGERY.finditer(folded):
        start, end = starts[m.start()], ends[m.end() - 1]
        if start < pos:
            continue
        # The replacement is the folded form of the whole source characters the match covers.
        lo, hi = bisect.bisect_left(starts, start), bisect.bisect_right(ends, end)
        parts += [text[pos:start], folded[lo:hi].translate(_DEFANG)]
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def neutralize(text: str) -> str:
    """Text that can sit in a prompt without opening or closing one of our frames (any of
    prompts.FRAME_TAGS, in any case, spacing, width or entity spelling, with any attributes) or
    forging a role: the one function every frame's data goes through.

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


def visible(text: str) -> str:
    """A name as a reader sees it, on one line: invisible format characters (bidi overrides such as
    U+202E, zero-width marks, tag characters: Unicode category Cf) dropped, so a file name cannot
    show its extension backwards; controls and line or paragraph breaks made spaces; runs of spaces
    one. For names (files, people), not for a message's text."""
    if text.isascii() and text.isprintable():
        return " ".join(text.split()) if "  " in text or text != text.strip() else text
    kept = []
    for c in text:
        cat = unicodedata.category(c)
        if cat in ("Cf", "Cs"):
            continue
        kept.append(" " if cat[0] == "C" or cat in ("Zl", "Zp") else c)
    return " ".join("".join(kept).split())


def frame_attribute(value: str) -> str:
    """A value inside one of our frames' opening tags (a document's name="..."): visible, one line,
    without a quote or bracket that could end the attribute or the tag, nothing that reads as one."""
    return neutralize(visible(value).translate({ord('"'): "'", ord("<"): "‹", ord(">"): "›"}))


def render_name(name: str | None, limit: int = 64) -> str:
    """A display name as one safe line: invisible characters dropped, controls and line breaks
    collapsed to spaces, nothing that reads as one of our tags."""
    if not name:
        return ""
    out = " ".join(neutralize(visible(name)).split())
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
