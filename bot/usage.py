"""What the bot spends, recorded for /stats and the API's /usage: every LLM call (purpose, model,
tokens; per space when it was charged to one, memory.llm.USAGE_SPACE) and, per turn, the tokens
the auto-recall injected. Rows are buffered and written in batches, off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from memory.erase import EraseRules, Kept
from memory.llm import USAGE_SPACE
from memory.store.connection import Store
from memory.store.rows import utc_naive
from memory.store.schema import Migration

# Side tables, not columns on llm_usage: DuckDB 1.5.5 cannot replay an uncheckpointed ALTER
# TABLE, and a new table needs none.
USAGE_MIGRATIONS = (Migration(520, "llm usage per space", """
    CREATE TABLE llm_usage_space (
        called_at TIMESTAMP NOT NULL,
        space_id VARCHAR NOT NULL,
        purpose VARCHAR NOT NULL,
        model VARCHAR,
        ok BOOLEAN NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL
    );
"""), Migration(530, "injected tokens per turn", """
    CREATE TABLE turn_usage (
        called_at TIMESTAMP NOT NULL,
        space_id VARCHAR NOT NULL,
        injected_tokens INTEGER NOT NULL,   -- the memory block's tokens (memory.text.estimate_tokens)
        recall_ms DOUBLE NOT NULL
    );
"""))
# What was spent stays after an erase (counts only: no words are recorded here).
USAGE_ERASE = EraseRules(kept=(Kept("llm_usage_space", "tokens spent per call: counts, no words"),
                               Kept("turn_usage", "tokens injected per turn: counts, no words")))


class UsageRecorder:
    """Buffers LLM calls and per-turn recall sizes; `flush` writes them. A bot.observe.TurnObserver."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.store = store
        self.clock = clock
        self._rows: list[list] = []
        self._space_rows: list[list] = []
        self._turn_rows: list[list] = []

    listener: Callable[[str, str, bool, int, int], None] | None = None  # the API's metrics, when served

    def add(self, purpose: str, model_name: str, ok: bool, prompt: int, completion: int) -> None:
        """The LLM's sink: one call."""
        now = utc_naive(self.clock())
        self._rows.append([now, purpose, model_name, ok, prompt, completion])
        space = USAGE_SPACE.get()
        if space is not None:
            self._space_rows.append([now, space, purpose, model_name, ok, prompt, completion])
        if self.listener is not None:
            self.listener(purpose, model_name, ok, prompt, completion)

    # --- bot.observe.TurnObserver ---------------------------------------------------------------
    def on_recall(self, seconds: float, injected_tokens: int) -> None:
        """A turn's auto-recall, charged to the turn's space (the agent runs it inside charged_to)."""
        space = USAGE_SPACE.get()
        if space is not None:
            self._turn_rows.append([utc_naive(self.clock()), space, injected_tokens, seconds * 1000])

    def on_turn(self, channel: str, outcome: str, seconds: float) -> None:
        pass

    def on_send_failure(self, channel: str, kind: str) -> None:
        pass

    def flush(self) -> int:
        rows, self._rows = self._rows, []
        space_rows, self._space_rows = self._space_rows, []
        turn_rows, self._turn_rows = self._turn_rows, []

        def write(con) -> None:
            if rows:
                con.executemany("INSERT INTO llm_usage VALUES (?, ?, ?, ?, ?, ?)", rows)
            if space_rows:
                con.executemany("INSERT INTO llm_usage_space VALUES (?, ?, ?, ?, ?, ?, ?)", space_rows)
            if turn_rows:
                con.executemany("INSERT INTO turn_usage VALUES (?, ?, ?, ?)", turn_rows)

        if rows or space_rows or turn_rows:
            self.store.write(write)
        return len(rows)

    async def aflush(self) -> int:
        return await asyncio.to_thread(self.flush)
