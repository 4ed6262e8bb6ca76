"""The ingest worker's settings and the counts it keeps (what bot/settings.py's [memory] section maps to)."""

from __future__ import annotations

from dataclasses import dataclass

from memory.ingest import facts as F
from memory.ingest.raw import TITLE_CHARS


@dataclass(frozen=True)
class IngestSettings:
    # E5 puts unrelated texts near 0.72 and paraphrases near 0.9, so DESIGN's 0.80 would send
    # most turns to the judge; these thresholds are calibrated for the local model.
    dedup_threshold: float = 0.93
    fact_candidate_threshold: float = 0.86
    title_min_chars: int = TITLE_CHARS      # shorter messages are their own title (no LLM tokens)
    max_attempts: int = 3
    backoff_seconds: float = 30.0
    workers: int = 4                         # spaces ingested at once
    per_space: int = 16                      # a space's turns per claim (then it queues behind older ones)
    batch_tokens: int = 2000                 # a space's queued turns share one LLM call up to this size
    backlog_max: int = 100                   # turns due beyond which a reply waits for ingest (0: never)
    stall_seconds: float = 30.0              # ... unless no turn was ingested for this long (ingest stalled)
    fold_reconcile: bool = True              # False: close facts always go to the separate reconcile call
    poll_seconds: float = 5.0
    max_facts_per_turn: int = F.MAX_FACTS_PER_TURN


@dataclass
class IngestStats:
    turns: int = 0
    raw_fallbacks: int = 0
    exact_duplicates: int = 0
    semantic_duplicates: int = 0
    merges: int = 0
    facts_written: int = 0
