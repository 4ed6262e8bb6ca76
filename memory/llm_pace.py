"""What a model server shows it can do, and the timeouts that follow from it (issue 30).

A small model on a CPU writes 20 tokens a second; a fixed 60 s timeout cuts its 1,024-token memory
answer, and a fixed 30 s first-token limit cuts a reply whose long prompt it reads at 100 tokens a
second. Each endpoint's gate keeps a Pace: averages, from the calls that went through, of

- the prompt speed p (prompt tokens / seconds to the first token, from streamed calls), and
- the answer speed a (answer tokens / the seconds spent writing them: after the first token of a
  streamed call; for a whole answer, its time less the prompt's share at p),

and derives, never below what the configuration says (the floor):

    call timeout        = max(timeout, MARGIN * (P / p + N / a) + SLACK)
    first-token timeout = max(first_token_timeout, MARGIN * P / p + SLACK)

with P the call's prompt tokens (estimated from its characters), N its max_tokens, capped at
CAP seconds. Before anything is measured, the configured values hold.
"""

from __future__ import annotations

from dataclasses import dataclass

MARGIN = 2.0          # a busy machine may take twice what was measured
SLACK = 5.0           # seconds for the connection, the server's queue and scheduling
CAP = 3600.0          # the longest any derived timeout gets (the configuration's own maximum)
WEIGHT = 0.3          # the newest call's weight in the averages
CHARS_PER_TOKEN = 4   # prompt tokens estimated from characters (the fakes and most tokenizers agree)
MIN_SECONDS = 0.05    # shorter spans say nothing of a speed (a cached answer, a clock's grain)


@dataclass
class Pace:
    """Measured speeds of one endpoint (tokens per second; None until seen)."""

    prompt_rate: float | None = None
    answer_rate: float | None = None

    def observe(self, prompt_tokens: int, answer_tokens: int, total_s: float, first_token_s: float | None) -> None:
        """One successful call: its token counts, its time in a slot, its first token if streamed."""
        if first_token_s is not None and first_token_s >= MIN_SECONDS and prompt_tokens > 0:
            self.prompt_rate = _mix(self.prompt_rate, prompt_tokens / first_token_s)
            writing = total_s - first_token_s
        elif self.prompt_rate is not None:
            writing = total_s - prompt_tokens / self.prompt_rate
        else:
            writing = total_s
        if writing >= MIN_SECONDS and answer_tokens > 1:
            self.answer_rate = _mix(self.answer_rate, answer_tokens / writing)

    def call_timeout(self, floor: float, prompt_tokens: int, max_tokens: int) -> float:
        """Seconds one call may take: the floor, or what the measured speeds need, with a margin."""
        if self.answer_rate is None:
            return floor
        need = max_tokens / self.answer_rate + (prompt_tokens / self.prompt_rate if self.prompt_rate else 0.0)
        return min(max(floor, MARGIN * need + SLACK), max(floor, CAP))

    def first_token_timeout(self, floor: float, prompt_tokens: int) -> float:
        """Seconds a streamed call may wait for its first token: the floor, or the measured prompt
        speed's need, with a margin."""
        if self.prompt_rate is None:
            return floor
        return min(max(floor, MARGIN * prompt_tokens / self.prompt_rate + SLACK), max(floor, CAP))


def prompt_tokens_of(messages) -> int:
    """The prompt's tokens, estimated from the characters of its text."""
    chars = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    return chars // CHARS_PER_TOKEN + 1


def _mix(old: float | None, new: float) -> float:
    return new if old is None else old + WEIGHT * (new - old)
