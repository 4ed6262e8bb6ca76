"""The priority gate in front of one model endpoint (issue 30): replies first, memory never starved.

A model server at home answers one or two requests at a time. Every call memgate makes goes
through LiteLLM.complete, which first takes a slot at the gate of its endpoint (the server's
address, or the provider; one gate per endpoint, shared by the reply and the memory LLM). The
policy is GateState, a pure state machine (time is an argument); ModelGate runs it on the loop.

- S slots (`[llm] concurrency`). A call holds one from its request to its last byte. The wait
  for a slot is not the call's: its timeouts start when it holds one (a queued call is not a
  silent server).
- Replies (the purposes in PERSON_WAITS: a person waits) take the first free slot, in arrival
  order. When none is free, a memory call that holds one without its guarantee is preempted:
  cut (the server stops writing when its client goes) and queued again, keeping its place.
- Memory work starts by itself only when no reply waits, fewer than S - r slots are held
  (r = 1 when S > 1: a slot stays free for the next reply), and the last reply call ended
  at least g seconds ago:
      g = clamp(f, GRACE_MIN, GRACE_MAX) * 2 ** min(k, GRACE_DOUBLINGS)
  f = the recent replies' first-token time (slow replies keep memory away longer; a tool
  round's next call finds the slot free), k = memory calls preempted since one last finished
  (a person chatting on pushes memory further back).
- The guarantee (issue 33: memory never starves): R is the slot-seconds replies held while
  memory work waited, M the slot-seconds memory held while replies waited (the contended time
  only: a quiet hour of memory work is no debt). While replies wait, memory is owed when
      M * (1 - s) < s * R          (s = `[llm] memory_share`)
  and then memory calls already running are no longer preempted and the next free slot goes to
  the oldest waiting memory call, ahead of replies, as long as fewer than ceil(s * S) memory
  calls hold slots. M * (1 - s) - s * R so stays within one
  call of zero: under sustained replies memory keeps a share s of the server's time, less one
  call, and a reply waits for at most one such memory call.
- With several slots, memory owed its share (replies held slots while it waited) does not wait
  for the grace when no reply waits: it takes up to ceil(s * S) slots at once, one slot still
  left free, so busy chats whose reply calls never leave a gap as long as g do not starve it.
- Stopping: close(MEMORY) refuses new memory calls and cuts the running ones (ModelStopped: the
  work stays queued for the next start); close() does so for every call.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from memory.errors import ModelStopped
from memory.interrupt import until_set
from memory.llm_pace import Pace

log = logging.getLogger(__name__)
T = TypeVar("T")

Kind = Literal["reply", "memory"]
REPLY: Kind = "reply"
MEMORY: Kind = "memory"
# Calls a person waits on: the agent's reply, and the checks `doctor` and `onboard` run.
PERSON_WAITS = frozenset({"reply", "doctor", "onboard"})

GRACE_MIN, GRACE_MAX, GRACE_DOUBLINGS = 1.0, 15.0, 4
FIRST_TOKEN_WEIGHT = 0.3      # the weight of the newest reply in the first-token average
LOG_REPLY_WAIT = 1.0          # a reply that waited longer than this for a slot is logged


def kind_of(purpose: str) -> Kind:
    """A call's priority class: replies (a person waits) or memory work (the rest)."""
    return REPLY if purpose in PERSON_WAITS else MEMORY


def default_slots(local: bool) -> int:
    """`[llm] concurrency = 0`: one request at a time for a server on this machine (llama.cpp,
    Ollama on a home GPU or CPU), a few for a hosted one (its rate limits, not its cores)."""
    return 1 if local else 8


@dataclass(frozen=True)
class GatePolicy:
    slots: int = 1
    memory_share: float = 0.25


@dataclass(frozen=True)
class Decision:
    """What the gate does now: slots given (waiter id, guaranteed), calls cut, when to look again."""

    granted: tuple[tuple[int, bool], ...] = ()
    revoked: tuple[int, ...] = ()
    wake_at: float | None = None


@dataclass
class _Waiter:
    id: int
    kind: Kind
    since: float


@dataclass
class _Held:
    id: int
    kind: Kind
    started: float
    guaranteed: bool
    revoked: bool = False


class GateState:
    """The policy of the module header, as a state machine; every method takes the time."""

    def __init__(self, policy: GatePolicy, now: float) -> None:
        self.policy = policy
        self.waiting: list[_Waiter] = []          # by (since, id): a preempted call keeps its place
        self.held: dict[int, _Held] = {}
        self.closed: set[Kind] = set()
        self.reply_s = self.memory_s = 0.0         # R and M, up to `_at`
        self._at = now
        self.last_reply_end = float("-inf")
        self.first_token = GRACE_MIN               # f, the replies' first-token average
        self.preemptions = 0                       # k
        self._ids = itertools.count(1)

    # --- events ----------------------------------------------------------------------------
    def arrive(self, kind: Kind, now: float, since: float | None = None) -> int:
        """A call asks for a slot (waiting since `since`, default now); returns its id.
        ModelStopped when the gate is closed to its kind."""
        self._advance(now)
        if kind in self.closed:
            raise ModelStopped(f"the model gate is closed to {kind} calls (memgate is stopping)")
        waiter = _Waiter(next(self._ids), kind, now if since is None else since)
        bisect.insort(self.waiting, waiter, key=lambda w: (w.since, w.id))
        return waiter.id

    def withdraw(self, wid: int, now: float) -> None:
        """A waiting call gave up (its caller was cancelled)."""
        self._advance(now)
        self.waiting = [w for w in self.waiting if w.id != wid]

    def release(self, hid: int, now: float, first_token_s: float | None = None) -> None:
        """A call let its slot go (done, failed, cut or cancelled)."""
        self._advance(now)
        held = self.held.pop(hid, None)
        if held is None:
            return
        if held.kind == REPLY:
            self.last_reply_end = now
            if first_token_s is not None:
                self.first_token += FIRST_TOKEN_WEIGHT * (first_token_s - self.first_token)
        elif not held.revoked:
            self.preemptions = 0

    def close(self, kinds: set[Kind], now: float) -> tuple[list[int], list[int]]:
        """Refuse `kinds` from now on: (waiting ids to turn away, held ids to cut)."""
        self._advance(now)
        self.closed |= kinds
        turned = [w.id for w in self.waiting if w.kind in kinds]
        self.waiting = [w for w in self.waiting if w.kind not in kinds]
        cut = []
        for h in self.held.values():
            if h.kind in kinds and not h.revoked:
                h.revoked = True
                cut.append(h.id)
        return turned, cut

    # --- the policy ------------------------------------------------------------------------
    def grace(self) -> float:
        """g: how long after a reply call memory waits before it starts by itself."""
        return min(max(self.first_token, GRACE_MIN), GRACE_MAX) * 2 ** min(self.preemptions, GRACE_DOUBLINGS)

    def owed(self, now: float) -> bool:
        """Memory is behind its share: M * (1 - s) < s * R."""
        self._advance(now)
        s = self.policy.memory_share
        return self.memory_s * (1 - s) < s * self.reply_s

    def decide(self, now: float) -> Decision:
        """Give the free slots, cut what must make room for a reply; the changes are applied."""
        self._advance(now)
        granted: list[tuple[int, bool]] = []
        revoked: list[int] = []
        slots = self.policy.slots
        memory = [w for w in self.waiting if w.kind == MEMORY]
        replies = [w for w in self.waiting if w.kind == REPLY]

        def grant(w: _Waiter, guaranteed: bool) -> None:
            self.waiting.remove(w)
            self.held[w.id] = _Held(w.id, w.kind, now, guaranteed)
            granted.append((w.id, guaranteed))

        # The guarantee matters only when replies wait: memory alone goes by itself (below).
        owed = bool(replies) and (memory or any(h.kind == MEMORY for h in self.held.values())) and self.owed(now)
        if owed:
            for h in self.held.values():
                if h.kind == MEMORY:
                    h.guaranteed = True
            # At most ceil(s * S) slots held by the guarantee at once: memory's calls are long,
            # and M grows only as they run (more at once would overshoot the share by as many).
            guaranteed = sum(1 for h in self.held.values() if h.kind == MEMORY)
            if memory and guaranteed < math.ceil(self.policy.memory_share * slots):
                if len(self.held) >= slots:
                    return Decision()       # the next free slot is memory's
                grant(memory.pop(0), True)
        for w in replies:
            if len(self.held) < slots:
                grant(w, False)
        waiting_replies = sum(1 for w in self.waiting if w.kind == REPLY)
        if waiting_replies and not owed:
            leaving = sum(1 for h in self.held.values() if h.revoked)
            victims = sorted((h for h in self.held.values() if h.kind == MEMORY and not h.guaranteed and not h.revoked),
                             key=lambda h: h.started, reverse=True)     # the newest has done the least work
            for h in victims[:max(0, waiting_replies - leaving)]:
                h.revoked = True
                revoked.append(h.id)
                self.preemptions += 1
        wake_at = None
        if memory and not waiting_replies:
            room = slots - (1 if slots > 1 else 0)
            start_at = self.last_reply_end + self.grace()
            if now < start_at and slots > 1 and self.owed(now):
                # Replies held slots while memory waited and none waits now. With several slots
                # the grace kept memory out for as long as reply calls followed each other within
                # it (30 busy chats end one every few tenths of a second: ingest starved, issue
                # 33): memory owed its share takes up to ceil(s * S) slots now, one still free.
                cap = math.ceil(self.policy.memory_share * slots)
                while (memory and len(self.held) < room
                       and sum(1 for h in self.held.values() if h.kind == MEMORY) < cap):
                    grant(memory.pop(0), False)
                if memory:
                    wake_at = start_at
            elif now < start_at:
                wake_at = start_at
            else:
                while memory and len(self.held) < room:
                    grant(memory.pop(0), False)
        return Decision(tuple(granted), tuple(revoked), wake_at)

    def _advance(self, now: float) -> None:
        """R and M up to `now` (nothing changes between two events: the slots held since the last)."""
        span = now - self._at
        if span <= 0:
            return
        replies = sum(1 for h in self.held.values() if h.kind == REPLY)
        if any(w.kind == MEMORY for w in self.waiting):
            self.reply_s += span * replies
        if any(w.kind == REPLY for w in self.waiting):
            self.memory_s += span * (len(self.held) - replies)
        self._at = now


class Lease:
    """A slot held for one call: `revoked` is set when the gate takes it back."""

    def __init__(self, hid: int, guaranteed: bool, started: float, clock: Callable[[], float]) -> None:
        self.id = hid
        self.guaranteed = guaranteed
        self.started = started
        self.revoked = asyncio.Event()
        self.first_token_s: float | None = None
        self._clock = clock

    def first_token(self) -> None:
        """The call's first token came (a streamed call): its time is measured for the endpoint."""
        if self.first_token_s is None:
            self.first_token_s = self._clock() - self.started


class ModelGate:
    """The gate of one endpoint on the event loop, with its measured speed (`pace`)."""

    def __init__(self, name: str, policy: GatePolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.pace = Pace()
        self._clock = clock
        self.state = GateState(policy, clock())
        self._granted: dict[int, asyncio.Future[bool]] = {}
        self._leases: dict[int, Lease] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def run(self, purpose: str, call: Callable[[Lease], Awaitable[T]]) -> T:
        """`call(lease)` once a slot is held; a memory call that is preempted runs again when it
        gets a slot back. ModelStopped when the gate is (or gets) closed to this kind of call."""
        kind = kind_of(purpose)
        since = self._clock()
        while True:
            lease = await self._enter(kind, since)
            if kind == REPLY and lease.started - since > LOG_REPLY_WAIT:
                log.info("a reply waited %.1f s for a slot at the model %s", lease.started - since, self.name)
            try:
                task = await until_set(call(lease), lease.revoked)
                if not task.cancelled():
                    return task.result()
            finally:
                self._leave(lease)
            if kind in self.state.closed:
                raise ModelStopped(f"{purpose} call to the model {self.name} cut: memgate is stopping")
            log.debug("%s call preempted at the model %s by a reply; it waits again", purpose, self.name)

    def close(self, kind: Kind | None = None) -> None:
        """Refuse new calls of `kind` (None: every call) and cut those running."""
        turned, cut = self.state.close({kind} if kind else {REPLY, MEMORY}, self._clock())
        for wid in turned:
            future = self._granted.pop(wid, None)
            if future is not None and not future.done():
                future.set_exception(ModelStopped(f"the model gate of {self.name} closed (memgate is stopping)"))
        for hid in cut:
            lease = self._leases.get(hid)
            if lease is not None:
                lease.revoked.set()
        self._decide()

    async def _enter(self, kind: Kind, since: float) -> Lease:
        wid = self.state.arrive(kind, self._clock(), since)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._granted[wid] = future
        self._decide()
        try:
            guaranteed = await future
        except asyncio.CancelledError:
            self._granted.pop(wid, None)
            if future.done() and not future.cancelled() and future.exception() is None:
                self.state.release(wid, self._clock())   # granted as the caller went away
            else:
                self.state.withdraw(wid, self._clock())
            self._decide()
            raise
        lease = Lease(wid, guaranteed, self._clock(), self._clock)
        self._leases[wid] = lease
        return lease

    def _leave(self, lease: Lease) -> None:
        self._leases.pop(lease.id, None)
        self.state.release(lease.id, self._clock(), lease.first_token_s)
        self._decide()

    def _decide(self) -> None:
        now = self._clock()
        decision = self.state.decide(now)
        for wid, guaranteed in decision.granted:
            future = self._granted.pop(wid, None)
            if future is not None and not future.done():
                future.set_result(guaranteed)
        for hid in decision.revoked:
            lease = self._leases.get(hid)
            if lease is not None:
                lease.revoked.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if decision.wake_at is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, decision.wake_at - now), self._decide)


def endpoint_of(model: str, api_base: str | None) -> str:
    """The key of the server a call goes to: its address, or the provider of a hosted model."""
    if api_base:
        return api_base.strip().rstrip("/").lower()
    return model.split("/", 1)[0] if "/" in model else "openai"


class ModelGates:
    """One gate per endpoint, shared by every LLM that calls it (built once by the app)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._gates: dict[str, ModelGate] = {}
        self._clock = clock

    def gate(self, endpoint: str, policy: GatePolicy) -> ModelGate:
        """The endpoint's gate (the first policy given for an endpoint is the one it keeps)."""
        if endpoint not in self._gates:
            self._gates[endpoint] = ModelGate(endpoint, policy, clock=self._clock)
        return self._gates[endpoint]

    def close(self, kind: Kind | None = None) -> None:
        """Close every gate to `kind` (None: to every call)."""
        for gate in self._gates.values():
            gate.close(kind)
