"""Memory Insight: the entities a space's facts and chunks mention and how they co-occur.

Entities, Chinese: jieba's part-of-speech tags (nr person, ns place, nt organisation, nz other
proper noun). jieba's dictionary tags many words nr that are no one's name (宫保鸡 a dish, 徐汇区
a district, 万古长青 an idiom), so a word tagged nr counts as a person only when jieba's own
character model (the HMM posseg uses for words it does not know) also reads its characters as one
name; a rejected word with a place suffix (区, 市, 路 ...) is a place, the rest is dropped. Common
words the dictionary tags as proper nouns (东西, 城市, 普通) are never entities. Times are not
entities.

Entities, English: capitalised word runs ("Ana", "New York", "Bank of America") without
stopwords wherever they stand ("To", "The", "I'm"), possessives ("Ada's" -> "Ada"), weekday and
month names. A sentence's first word is capitalised anyway, so it is weighed against how the
memories at hand write it (truecasing): a name if they capitalise it mid-sentence ("with Ana"),
not if they write it in lower case ("Visited": "visited" elsewhere) or it is inflected like a verb
or adjective ("Prefers", "Allergic"); a name otherwise.

Edges: two entities in the same memory co-occur. With N memories, n(a) memories naming a and
n(a,b) naming both, weight = n(a,b) and lift = n(a,b) * N / (n(a) * n(b)) (> 1: they appear
together more often than chance). Pure functions; the caller reads the texts and caches.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from memory.segmenter import pos_tags
from memory.text import EN_STOPWORDS, has_cjk

CALENDAR_WORDS = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday".split())
# Abbreviations are names too often ("Jan", "Sun", "Wed" in a surname list): dropped only beside a number.
_CALENDAR_ABBREVIATIONS = frozenset("jan feb mar apr jun jul aug sep sept oct nov dec "
                                    "mon tue tues wed thu thur thurs fri sat sun".split())
_CONTRACTIONS = frozenset(("m", "re", "ll", "ve", "d", "t"))
# Titles: part of no name on their own ("Dr. Smith" -> "Smith").
_TITLES = frozenset("mr mrs ms miss dr prof sir madam st mt".split())
# Capitalised words that are never entities wherever they stand, beyond the stopwords: greetings,
# discourse words, relative days, the roles a transcript names.
NOT_NAMES = EN_STOPWORDS | CALENDAR_WORDS | frozenset(
    "ok okay hi hello hey thanks thank please sure yeah yep nope oh well maybe just now today tonight "
    "tomorrow yesterday last next every sorry great good nice cool right remember note user assistant "
    "mine two three dear fine hmm wow anyway actually really".split()) | _TITLES
# Lower-case words that join a name's capitalised parts: "Bank of America", "Leonardo da Vinci".
_CONNECTORS = frozenset("of de da del della di du van von der den la le y bin al".split())
# A word: letters, inner hyphens and apostrophes ("Jean-Luc", "O'Brien", "Ada's").
_WORD = re.compile(r"[^\W\d_](?:[^\W_]|[-'’](?=[^\W\d_]))*")
_SENTENCE_END = re.compile(r"[.!?…。！？\n]")


@dataclass(frozen=True, slots=True)
class Entity:
    label: str
    kind: str                  # person | place | organisation | name


@dataclass(frozen=True, slots=True)
class Casing:
    """How the texts at hand write their words: the evidence for a sentence's capitalised first word."""

    lower: frozenset[str]      # written in lower case somewhere: a common word ("visited")
    proper: frozenset[str]     # capitalised inside a sentence somewhere: a name ("with Ana")


def casing(texts: Iterable[str]) -> Casing:
    """The Casing of `texts` (lower-cased keys)."""
    lower, proper = set(), set()
    for text in texts:
        for m in _WORD.finditer(text):
            w = m.group()
            if w.islower():
                lower.add(w)
            elif w[0].isupper() and not _starts_sentence(text, m.start()):
                proper.add(w.lower().replace("’", "'").split("'")[0])
    return Casing(frozenset(lower), frozenset(proper))


def _starts_sentence(text: str, at: int) -> bool:
    before = text[:at].rstrip(" \t\"'“‘([")
    return not before or bool(_SENTENCE_END.match(before[-1]))


# Endings of inflected English words: a capitalised sentence opener with one of them and no other
# evidence is a verb or adjective ("Prefers", "Visited", "Running", "Allergic"), not a name.
_INFLECTED = re.compile(r"(?:[^s]s|ed|ing|ly|ic|ous|ful|ive|able|ible)$")


def entities(text: str, case: Casing | None = None) -> set[Entity]:
    """The entities one text mentions (deduplicated, labels as written).

    `case`: how the texts at hand write their words (default: this text's own).
    """
    found = {Entity(label, "name") for label in latin_names(text, case)}
    if has_cjk(text):
        found |= cjk_entities(text)
    return found


def latin_names(text: str, case: Casing | None = None) -> list[str]:
    """The capitalised name runs of `text`, in order (see the module docstring for what is dropped)."""
    case = casing([text]) if case is None else case
    names: list[str] = []
    run: list[str] = []
    pending: list[str] = []          # connectors waiting for the next capitalised word
    last_end = 0

    def close() -> None:
        if run:
            label = " ".join(run)
            if len(label) >= 2 and label not in names:
                names.append(label)
        run.clear()
        pending.clear()

    for m in _WORD.finditer(text):
        word, gap = m.group(), text[last_end:m.start()]
        starts_sentence = _starts_sentence(text, m.start())
        if gap.strip() and gap.strip() not in ("-",):   # punctuation between words ends a run
            close()
        last_end = m.end()
        base, _, suffix = word.replace("’", "'").partition("'")
        if suffix.lower() in _CONTRACTIONS:              # I'm, don't, we'll: never a name
            close()
            continue
        if suffix.lower() != "s":                        # O'Brien: the apostrophe is the name's own
            base, suffix = word, ""
        lower = base.lower()
        if not base[0].isupper():
            if run and lower in _CONNECTORS:
                pending.append(base)
            else:
                close()
            continue
        if lower in NOT_NAMES or _calendar_abbreviation(lower, text, m.end()) or len(base) < 2 and base != base.upper():
            close()
            continue
        if starts_sentence and not run and not _opener_is_name(lower, case):
            close()
            continue
        run.extend(pending)
        pending.clear()
        run.append(base)
        if suffix:                                       # "Ada's brother": the possessive ends the name
            close()
    close()
    return names


def _opener_is_name(lower: str, case: Casing) -> bool:
    """A sentence's capitalised first word: a name if the texts also capitalise it mid-sentence;
    not if they write it in lower case ("Visited Lisbon") or it is inflected like a verb or an
    adjective ("Prefers tea", "Allergic to peanuts"); otherwise a name ("Ana lives in Lisbon")."""
    if lower in case.proper:
        return True
    return lower not in case.lower and not _INFLECTED.search(lower)


def _calendar_abbreviation(lower: str, text: str, end: int) -> bool:
    return lower in _CALENDAR_ABBREVIATIONS and re.match(r"\.?\s*\d", text[end:end + 4]) is not None


_CJK_WORD = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
_PERSON_FLAGS = frozenset(("nr", "nrfg", "nrt"))
_CJK_KINDS = {"ns": "place", "nt": "organisation", "nz": "name"}
_PLACE_SUFFIX = frozenset("区市省县镇乡村路街巷道州湾岛港站")
# Everyday words jieba's dictionary tags as proper nouns (its tags come from one newspaper corpus):
# 东西 "thing" is ns there, 普通 "ordinary" nz, 令人 "makes one" nrt.
_COMMON_WORDS = frozenset(
    "东西 城市 外国 爱国 英雄 平原 太阳 南北 东北 西北 西南 东南 朝廷 江南 国外 世界 地方 中外 天下 "
    "普通 和平 论文 汇报 通讯 精华 正文 中毒 抗议 大战 金银 家族 英文 中文 英语 汉语 百科 共和 "
    "令人 多谢 崇拜 崇高 崇尚 保姆 二人 豪杰 威武 登基 大王 天王 法王 老夫 庄稼人 胡说 高高的 祥和 连成 "
    "妈妈 爸爸 哥哥 姐姐 弟弟 妹妹 爷爷 奶奶 老师 同学 朋友 医生".split())


def cjk_entities(text: str) -> set[Entity]:
    """People, places, organisations and other proper nouns of the Chinese in `text`."""
    found = set()
    for word, flag in pos_tags(text):
        kind = cjk_kind(word, flag)
        if kind is not None:
            found.add(Entity(word, kind))
    return found


def cjk_kind(word: str, flag: str) -> str | None:
    """The entity kind of one jieba word and part-of-speech flag, or None (not an entity)."""
    if not _CJK_WORD.fullmatch(word) or word in _COMMON_WORDS:
        return None
    if flag in _PERSON_FLAGS:
        if reads_as_name(word):
            return "person"
        return "place" if word[-1] in _PLACE_SUFFIX else None
    return _CJK_KINDS.get(flag)


@lru_cache(maxsize=8192)
def reads_as_name(word: str) -> bool:
    """True when jieba's character HMM tags the whole word as one person name (B-nr M-nr.. E-nr).

    The dictionary says 宫保鸡 is nr; the characters say 宫保 is a name and 鸡 a noun: not a person.
    """
    from jieba.posseg import char_state_tab, prob_emit, prob_start, prob_trans, viterbi

    _, path = viterbi(word, char_state_tab.P, prob_start.P, prob_trans.P, prob_emit.P)
    flags = {flag for _, flag in path}
    starts = [pos for pos, _ in path if pos in ("B", "S")]
    return len(flags) == 1 and flags <= _PERSON_FLAGS and starts == [path[0][0]] and path[0][0] == "B"


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    label: str
    kind: str
    count: int
    evidence: tuple[str, ...] = ()   # the first memories that mention it (the dashboard lists them)


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    weight: int
    lift: float
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


NODE_EVIDENCE = 20


def node_id(e: Entity) -> str:
    return f"{e.kind}:{e.label.casefold()}"


def graph(memories: Iterable[tuple[str, str]], limit: int = 30, evidence: int = 5) -> Graph:
    """The `limit` most mentioned entities of (memory id, text) pairs and their co-occurrence edges."""
    memories = list(memories)
    case = casing(text for _, text in memories)
    per_memory: list[tuple[str, set[str]]] = []
    labels: dict[str, Entity] = {}
    counts: Counter[str] = Counter()
    mentions: dict[str, list[str]] = {}
    for mid, text in memories:
        ids = set()
        for e in entities(text, case):
            nid = node_id(e)
            labels.setdefault(nid, e)
            ids.add(nid)
        counts.update(ids)
        for nid in ids:
            ev = mentions.setdefault(nid, [])
            if len(ev) < NODE_EVIDENCE:
                ev.append(mid)
        per_memory.append((mid, ids))
    n = len(per_memory)
    top = [nid for nid, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]
    keep = set(top)
    pair_count: Counter[tuple[str, str]] = Counter()
    pair_evidence: dict[tuple[str, str], list[str]] = {}
    for mid, ids in per_memory:
        for a, b in combinations(sorted(ids & keep), 2):
            pair_count[(a, b)] += 1
            ev = pair_evidence.setdefault((a, b), [])
            if len(ev) < evidence:
                ev.append(mid)
    nodes = tuple(Node(nid, labels[nid].label, labels[nid].kind, counts[nid], tuple(mentions[nid])) for nid in top)
    edges = tuple(Edge(a, b, c, round(c * n / (counts[a] * counts[b]), 3), tuple(pair_evidence[(a, b)]))
                  for (a, b), c in sorted(pair_count.items(), key=lambda kv: (-kv[1], kv[0])))
    return Graph(nodes, edges)

