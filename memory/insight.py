"""Memory Insight: the entities a space's facts and chunks mention and how they co-occur.

Entities: for CJK text, jieba's part-of-speech tags (nr person, ns place, nt organisation, nz
other proper noun, t time); for Latin text, capitalised word runs that do not start a sentence
(names, places, organisations, products) and dates (month names, weekdays, ISO dates).

Edges: two entities in the same memory co-occur. With N memories, n(a) memories naming a and
n(a,b) naming both, weight = n(a,b) and lift = n(a,b) * N / (n(a) * n(b)) (> 1: they appear
together more often than chance). Pure functions; the caller reads the texts and caches.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

from memory.text import has_cjk

_MONTHS = ("january february march april may june july august september october november december "
           "monday tuesday wednesday thursday friday saturday sunday")
_DATE = re.compile(r"\b(?:\d{4}-\d{2}-\d{2}|(?:%s)(?:\s+\d{1,2}(?:st|nd|rd|th)?)?)\b" % "|".join(_MONTHS.split()), re.I)
# A capitalised run: "Ana", "New York", "Acme Corp", "iPhone 15" is missed on purpose (lowercase start).
_NAME = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:of\s+|de\s+|da\s+)?[A-Z][\w'’-]*)*")
# Capitalised words that are not entities wherever they stand.
_STOP = frozenset("I I'm I've I'd I'll The A An My Your Our We You He She It They This That These Those Yes No Ok "
                  "Okay Hi Hello Thanks Thank Please Sure Also And But So Then When What Where Who Why How "
                  "Do Does Did Is Are Was Were Can Could Would Should Will Let Let's Here There Oh Well Yesterday Today "
                  "Tomorrow Tonight Last Next Every Some Any All Not Maybe Just Now Today's If Because After "
                  "Before Since Until While Sorry Great Good Nice Cool Right Please Remember Note Also User "
                  "Assistant Me Him Her Them Us His Its Their Mine One Two".split())
# Capitalised sentence openers are mostly stop words; the rest (Ana, Lisbon) are entities anyway.
_CJK_KINDS = {"nr": "person", "nrfg": "person", "nrt": "person", "ns": "place", "nt": "organisation",
              "nz": "name", "t": "date"}


@dataclass(frozen=True, slots=True)
class Entity:
    label: str
    kind: str                  # person | place | organisation | name | date


def entities(text: str) -> set[Entity]:
    """The entities one text mentions (deduplicated, labels as written; dates lowercased)."""
    found: set[Entity] = set()
    for m in _DATE.finditer(text):
        found.add(Entity(m.group().lower(), "date"))
    dates = {e.label for e in found}
    for m in _NAME.finditer(text):
        label = m.group().strip()
        words = label.split()
        while words and words[0] in _STOP:
            words = words[1:]
        label = " ".join(words)
        if len(label) < 2 or label.lower() in dates or label in _STOP:
            continue
        found.add(Entity(label, "name"))
    if has_cjk(text):
        found |= _cjk_entities(text)
    return found


def _cjk_entities(text: str) -> set[Entity]:
    import jieba.posseg as pseg

    return {Entity(w.word, _CJK_KINDS[w.flag]) for w in pseg.cut(text)
            if w.flag in _CJK_KINDS and len(w.word) >= 2}


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
    per_memory: list[tuple[str, set[str]]] = []
    labels: dict[str, Entity] = {}
    counts: Counter[str] = Counter()
    mentions: dict[str, list[str]] = {}
    for mid, text in memories:
        ids = set()
        for e in entities(text):
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

