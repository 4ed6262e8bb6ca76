"""The gate's policy as a state machine (memory/llm_gate.py): replies first, memory preempted when
it holds the slot a reply needs, memory's guaranteed share under sustained replies, closing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.errors import ModelStopped
from memory.llm_gate import GRACE_MIN, MEMORY, REPLY, GatePolicy, GateState, kind_of


def test_the_purposes_a_person_waits_on_are_replies() -> None:
    assert kind_of("reply") == REPLY and kind_of("doctor") == REPLY
    assert {kind_of(p) for p in ("ingest", "reconcile", "task_boundary", "task_summary", "skill_write")} == {MEMORY}


def test_a_waiting_reply_takes_the_free_slot_before_older_memory_work() -> None:
    gate = GateState(GatePolicy(slots=1), now=0.0)
    memory = gate.arrive(MEMORY, now=0.0)
    reply = gate.arrive(REPLY, now=1.0)
    assert gate.decide(now=1.0).granted == ((reply, False),)
    assert memory in {w.id for w in gate.waiting}


def test_a_reply_preempts_memory_work_holding_the_only_slot_which_then_waits_again_in_its_place() -> None:
    gate = GateState(GatePolicy(slots=1), now=0.0)
    first = gate.arrive(MEMORY, now=0.0)
    assert gate.decide(now=0.0).granted == ((first, False),)
    second = gate.arrive(MEMORY, now=0.5)
    reply = gate.arrive(REPLY, now=1.0)
    decision = gate.decide(now=1.0)
    assert decision.revoked == (first,) and decision.granted == ()
    gate.release(first, now=1.1)
    again = gate.arrive(MEMORY, now=1.1, since=0.0)   # the cut call asks again with its first time
    assert gate.decide(now=1.1).granted == ((reply, False),)
    assert [w.id for w in gate.waiting] == [again, second]


def test_memory_waits_a_grace_after_a_reply_and_longer_after_each_preemption() -> None:
    gate = GateState(GatePolicy(slots=1), now=0.0)
    reply = gate.arrive(REPLY, now=0.0)
    gate.decide(now=0.0)
    gate.release(reply, now=2.0)
    memory = gate.arrive(MEMORY, now=2.0)
    decision = gate.decide(now=2.0)
    assert decision.granted == () and decision.wake_at == 2.0 + GRACE_MIN
    assert gate.decide(now=2.0 + GRACE_MIN).granted == ((memory, False),)
    gate.arrive(REPLY, now=3.5)
    assert gate.decide(now=3.5).revoked == (memory,)
    assert gate.grace() == 2 * GRACE_MIN


def test_with_several_slots_memory_leaves_one_free_for_the_next_reply() -> None:
    gate = GateState(GatePolicy(slots=3), now=0.0)
    ids = [gate.arrive(MEMORY, now=0.0) for _ in range(4)]
    assert [g for g, _ in gate.decide(now=0.0).granted] == ids[:2]
    reply = gate.arrive(REPLY, now=0.1)
    assert gate.decide(now=0.1).granted == ((reply, False),)


def test_closing_to_memory_turns_waiting_memory_away_cuts_running_memory_and_refuses_new_memory() -> None:
    gate = GateState(GatePolicy(slots=2), now=0.0)
    running = gate.arrive(MEMORY, now=0.0)
    gate.decide(now=0.0)
    waiting = gate.arrive(MEMORY, now=0.1)
    reply = gate.arrive(REPLY, now=0.1)
    turned, cut = gate.close({MEMORY}, now=0.1)
    assert turned == [waiting] and cut == [running]
    with pytest.raises(ModelStopped):
        gate.arrive(MEMORY, now=0.2)
    assert gate.decide(now=0.2).granted == ((reply, False),)


def simulate(policy: GatePolicy, reply_s: float, memory_s: float, horizon: float) -> tuple[float, float, float]:
    """Replies always waiting (a person behind every one), memory work always waiting; each granted
    call holds its slot for its duration. Returns (reply slot-seconds, memory slot-seconds kept,
    memory's longest wait between two of its calls ending)."""
    gate = GateState(policy, now=0.0)
    ends: dict[int, tuple[float, str]] = {}
    kind_of_id: dict[int, str] = {}
    now, busy, last_memory_end, longest = 0.0, {REPLY: 0.0, MEMORY: 0.0}, 0.0, 0.0
    for kind in (REPLY, MEMORY):
        kind_of_id[gate.arrive(kind, now=0.0)] = kind
    while now < horizon:
        decision = gate.decide(now)
        for wid, _ in decision.granted:
            kind = kind_of_id[wid]
            ends[wid] = (now + (reply_s if kind == REPLY else memory_s), kind)
            kind_of_id[gate.arrive(kind, now=now)] = kind   # the next one of its kind waits at once
        for hid in decision.revoked:                           # a cut call lets go at once, its work lost
            gate.release(hid, now)
            ends.pop(hid)
            kind_of_id[gate.arrive(MEMORY, now=now)] = MEMORY
        if decision.revoked:
            continue
        moments = [t for t, _ in ends.values()] + ([decision.wake_at] if decision.wake_at else [])
        now = min(moments)
        for hid, (end, kind) in list(ends.items()):
            if end <= now:
                gate.release(hid, now)
                busy[kind] += (reply_s if kind == REPLY else memory_s)
                del ends[hid]
                if kind == MEMORY:
                    longest = max(longest, now - last_memory_end)
                    last_memory_end = now
    return busy[REPLY], busy[MEMORY], longest


@settings(max_examples=40, deadline=None)
@given(share=st.sampled_from([0.1, 0.25, 0.5]), reply_s=st.floats(0.5, 20), memory_s=st.floats(0.5, 30),
       slots=st.integers(1, 3))
def test_under_sustained_replies_memory_keeps_its_share_of_the_server(share, reply_s, memory_s, slots) -> None:
    horizon = 1200.0
    replies, memory, longest = simulate(GatePolicy(slots=slots, memory_share=share), reply_s, memory_s, horizon)
    edge = (reply_s + memory_s) * slots      # the calls in flight at the horizon
    # Its share of the time, and never a wait longer than the replies it owes plus the calls in
    # flight: memory is never starved.
    assert memory >= share * (replies + memory) - edge
    assert longest <= memory_s * (1 - share) / share + 2 * (reply_s + memory_s) + 1e-6
    # Nor does it take more while replies wait.
    assert memory <= share * (replies + memory) + edge


def test_with_several_slots_memory_owed_its_share_does_not_wait_for_a_gap_between_replies() -> None:
    """Found on the soak (30 busy chats, a slot for each): a reply call ended every few tenths of
    a second, so memory, waiting for a grace after the last one, got in only by chance and the
    backlog grew; replies never waited, so the guarantee never applied."""
    gate = GateState(GatePolicy(slots=8, memory_share=0.25), now=0.0)
    replies = [gate.arrive(REPLY, now=0.0) for _ in range(3)]
    gate.decide(now=0.0)
    gate.release(replies[0], now=0.2)
    memory = [gate.arrive(MEMORY, now=0.2) for _ in range(3)]
    assert gate.decide(now=0.2).granted == ()          # nothing owed yet: the grace holds
    gate.release(replies[1], now=0.5)                   # replies held slots while memory waited
    nxt = gate.arrive(REPLY, now=0.5)
    decision = gate.decide(now=0.5)
    assert (nxt, False) in decision.granted
    assert [g for g, _ in decision.granted if g != nxt] == memory[:2]   # ceil(0.25 * 8) = 2 at once
    assert decision.wake_at == 0.5 + GRACE_MIN          # the third waits for the grace as before


def test_with_one_slot_memory_still_waits_the_grace_after_a_reply() -> None:
    gate = GateState(GatePolicy(slots=1), now=0.0)
    reply = gate.arrive(REPLY, now=0.0)
    gate.decide(now=0.0)
    memory = gate.arrive(MEMORY, now=0.0)
    gate.release(reply, now=2.0)                        # memory waited while the reply held the slot
    assert gate.decide(now=2.0).granted == ()
    assert gate.decide(now=2.0 + GRACE_MIN).granted == ((memory, False),)
