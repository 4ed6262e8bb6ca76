"""Prometheus metrics on their own registry (never the process-global one, so two apps in one
process, as in tests, never collide): turns, LLM calls and tokens, ingest queue, channel sends,
recall latency. Queue depth and age are read from the database at scrape time. `Metrics` is a
bot.observe.TurnObserver: the gateway, outbox and agent report to it without importing it."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

# Seconds; turns wait on an LLM (seconds), recall on DuckDB (milliseconds).
TURN_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
RECALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
INJECTED_BUCKETS = (0, 50, 100, 200, 400, 800, 1200, 2000)  # tokens; the default budget is 800


class _QueueCollector:
    """ingest queue depth and the age of its oldest pending turn, from one SQL query per scrape."""

    def __init__(self, read: Callable[[], tuple[int, float]]) -> None:
        self.read = read

    def collect(self):
        depth, age = self.read()
        yield GaugeMetricFamily("memgate_ingest_queue_depth", "Turns waiting for ingestion", value=depth)
        yield GaugeMetricFamily("memgate_ingest_queue_oldest_seconds", "Age of the oldest waiting turn", value=age)


class Metrics:
    """The gateway's counters and histograms; `render()` is the /metrics body."""

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, queue: Callable[[], tuple[int, float]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns = Counter("memgate_turns", "Inbound messages processed, by outcome", ["channel", "outcome"],
                             registry=r)
        self.turn_latency = Histogram("memgate_turn_latency_seconds", "Time from message to reply",
                                      buckets=TURN_BUCKETS, registry=r)
        self.llm_calls = Counter("memgate_llm_calls", "LLM calls", ["purpose", "ok"], registry=r)
        self.llm_tokens = Counter("memgate_llm_tokens", "LLM tokens", ["purpose", "type"], registry=r)
        self.send_failures = Counter("memgate_channel_send_failures", "Reply parts a channel failed to send",
                                     ["channel", "kind"], registry=r)
        self.recall_latency = Histogram("memgate_recall_latency_seconds", "Hybrid recall latency",
                                        buckets=RECALL_BUCKETS, registry=r)
        self.injected_tokens = Histogram("memgate_recall_injected_tokens", "Tokens of the memory block per turn",
                                         buckets=INJECTED_BUCKETS, registry=r)
        self.api_requests = Counter("memgate_api_requests", "API requests", ["method", "status"], registry=r)
        if queue is not None:
            r.register(_QueueCollector(queue))

    def llm_call(self, purpose: str, model: str, ok: bool, prompt: int, completion: int) -> None:
        """Same signature as the usage recorder's sink, so both can listen to one LLM."""
        self.llm_calls.labels(purpose, str(ok).lower()).inc()
        self.llm_tokens.labels(purpose, "prompt").inc(prompt)
        self.llm_tokens.labels(purpose, "completion").inc(completion)

    # --- bot.observe.TurnObserver ---------------------------------------------------------------
    def on_turn(self, channel: str, outcome: str, seconds: float) -> None:
        self.turns.labels(channel, outcome).inc()
        self.turn_latency.observe(seconds)

    def on_send_failure(self, channel: str, kind: str) -> None:
        self.send_failures.labels(channel, kind).inc()

    def on_recall(self, seconds: float, injected_tokens: int) -> None:
        self.recall_latency.observe(seconds)
        self.injected_tokens.observe(injected_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
