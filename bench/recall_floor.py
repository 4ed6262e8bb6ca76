"""The plain floor of `shared/eval/floor.py` inside the recall bench: every turn raw ("speaker:
text", a photo's caption appended), BM25 over words (jieba's search-mode cut for CJK text, no
stopwords, k1 1.2, b 0.75, statistics per conversation), multilingual-e5-small cosine, and a
plain RRF (k = 60) of the two top-100 lists. Here it ranks with the bench's cached embeddings
and shows its top hits through the product's block, so the floor gets an R@block and a noise
figure measured the same way as memgate's (floor.py itself prints R@k only).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from memory.recall.search import MemoryHit

_CJK = re.compile(r"[\u3400-\u9fff]")


def tokens(text: str) -> list[str]:
    import jieba

    text = text.lower()
    if _CJK.search(text):
        return [w for w in jieba.cut_for_search(text) if re.search(r"\w", w)]
    return re.findall(r"\w+", text)


class FloorIndex:
    """One conversation's turns, searchable the floor's way."""

    def __init__(self, turns: Sequence[tuple[str, str, str, datetime]], embedder) -> None:
        """`turns`: (dia_id, speaker, text, time) in order."""
        self.turns = list(turns)
        self.docs = [f"{who}: {text}" for _, who, text, _ in self.turns]
        self.embedder = embedder
        self.vectors = np.asarray(embedder.embed_passages(self.docs), dtype=np.float32)
        self.counts = [Counter(tokens(d)) for d in self.docs]
        self.lens = np.array([sum(c.values()) for c in self.counts], dtype=np.float64)
        self.avg = float(self.lens.mean()) if len(self.lens) else 1.0
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, c in enumerate(self.counts):
            for w, f in c.items():
                self.postings[w].append((i, f))

    def rank(self, question: str) -> list[int]:
        """Turn positions, best first (the RRF of the BM25 and the vector top 100)."""
        n = len(self.docs)
        s = np.zeros(n)
        for w in set(tokens(question)):
            pl = self.postings.get(w)
            if not pl:
                continue
            idf = math.log(1 + (n - len(pl) + 0.5) / (len(pl) + 0.5))
            for i, f in pl:
                s[i] += idf * f * 2.2 / (f + 1.2 * (1 - 0.75 + 0.75 * self.lens[i] / self.avg))
        q = np.asarray(self.embedder.embed_query(question), dtype=np.float32)
        bm = list(np.argsort(-s, kind="stable"))
        vec = list(np.argsort(-(self.vectors @ q), kind="stable"))
        rr: dict[int, float] = defaultdict(float)
        for r, i in enumerate(bm[:100]):
            rr[int(i)] += 1 / (61 + r)
        for r, i in enumerate(vec[:100]):
            rr[int(i)] += 1 / (61 + r)
        return sorted(rr, key=lambda i: -rr[i])

    def hits(self, order: Sequence[int], space: str) -> list[MemoryHit]:
        """Ranked turns as the hits the block renders (score = rank order)."""
        return [MemoryHit(id=self.turns[i][0], kind="chunk", space_id=space, title="", text=self.turns[i][2],
                          score=1.0 / (1 + r), created_at=self.turns[i][3], role="user", speaker=self.turns[i][1],
                          source_ids=(self.turns[i][0],))
                for r, i in enumerate(order)]
