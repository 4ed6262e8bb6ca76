"""What the gateway, the outbox and the agent report while they work: each turn's outcome and
time, each failed send, each auto-recall's time and size. They call a `TurnObserver` and never
know who listens, so none of them imports prometheus_client: the composition root (bot.app)
plugs in the usage recorder and, when the API is served, its metrics (bot.api.metrics).
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

log = logging.getLogger(__name__)

# answered: the agent replied; failed: the agent apologised (LLM down or timed out); command:
# answered without the LLM (a chat command, or a notice such as "stickers are not supported");
# refused: access said no (a pairing code, silence); error: a bug, logged.
TurnOutcome = Literal["answered", "failed", "cancelled", "command", "refused", "error", "waiting"]
SendFailure = Literal["transient", "permanent"]


class TurnObserver(Protocol):
    def on_turn(self, channel: str, outcome: TurnOutcome, seconds: float) -> None:
        """One inbound message processed, from taking it off the queue to its reply handed on."""

    def on_send_failure(self, channel: str, kind: SendFailure) -> None:
        """A reply part the channel did not deliver (transient: retried; permanent: given up)."""

    def on_recall(self, seconds: float, injected_tokens: int) -> None:
        """The auto-recall before a turn: its time and the tokens of the block it injected."""


class NoObserver:
    """The default: nobody listens."""

    def on_turn(self, channel: str, outcome: TurnOutcome, seconds: float) -> None:
        pass

    def on_send_failure(self, channel: str, kind: SendFailure) -> None:
        pass

    def on_recall(self, seconds: float, injected_tokens: int) -> None:
        pass


class Observers:
    """Several observers as one. A listener that raises is logged and never breaks a turn."""

    def __init__(self, *observers: TurnObserver) -> None:
        self._observers: list[TurnObserver] = list(observers)

    def add(self, observer: TurnObserver) -> None:
        self._observers.append(observer)

    def on_turn(self, channel: str, outcome: TurnOutcome, seconds: float) -> None:
        for o in self._observers:
            _safely(o.on_turn, channel, outcome, seconds)

    def on_send_failure(self, channel: str, kind: SendFailure) -> None:
        for o in self._observers:
            _safely(o.on_send_failure, channel, kind)

    def on_recall(self, seconds: float, injected_tokens: int) -> None:
        for o in self._observers:
            _safely(o.on_recall, seconds, injected_tokens)


def _safely(call, *args) -> None:
    try:
        call(*args)
    except Exception:
        log.warning("an observer failed (%s)", getattr(call, "__qualname__", call), exc_info=True)
