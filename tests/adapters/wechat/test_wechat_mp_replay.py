"""The (timestamp, nonce) memory that refuses replayed callbacks (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.wechat.mp.replay import ReplayGuard

NOW = 1_767_225_600.0


def test_a_pair_is_accepted_once():
    guard = ReplayGuard(60)
    assert guard.check(str(int(NOW)), "n1", NOW) == "fresh"
    assert guard.check(str(int(NOW)), "n1", NOW + 1) == "replayed"
    assert guard.check(str(int(NOW)), "n2", NOW + 1) == "fresh"  # another nonce
    assert guard.check(str(int(NOW) + 1), "n1", NOW + 1) == "fresh"  # another timestamp


@pytest.mark.parametrize("timestamp", [str(int(NOW) - 61), str(int(NOW) + 61), "", "soon", "1e9"])
def test_outside_the_window_or_not_a_number_is_stale(timestamp):
    assert ReplayGuard(60).check(timestamp, "n", NOW) == "stale"


def test_pairs_are_forgotten_once_their_timestamp_left_the_window():
    guard = ReplayGuard(60)
    for i in range(100):
        assert guard.check(str(int(NOW)), f"n{i}", NOW) == "fresh"
    assert len(guard) == 100
    # A minute on, the old pairs are stale (refused by the clock) and no longer held.
    assert guard.check(str(int(NOW) + 61), "later", NOW + 61) == "fresh"
    assert guard.check(str(int(NOW)), "n0", NOW + 61) == "stale"
    assert len(guard) == 1


def test_memory_is_bounded():
    guard = ReplayGuard(60, capacity=10)
    for i in range(50):
        guard.check(str(int(NOW) + i % 30), f"n{i}", NOW + 29)
    assert len(guard) == 10


@given(st.lists(st.tuples(st.integers(-120, 120), st.integers(0, 30), st.integers(0, 120)), max_size=100))
def test_no_pair_is_ever_fresh_twice_within_the_window(events):
    """Random (timestamp offset, nonce, clock step) sequences: a pair accepted is never accepted again
    while its timestamp is in the window, and memory never exceeds the pairs of one window."""
    guard = ReplayGuard(60)
    now = NOW
    accepted: dict[tuple[int, str], float] = {}
    for offset, nonce, step in events:
        now += step / 10
        ts = int(NOW) + offset
        verdict = guard.check(str(ts), f"n{nonce}", now)
        if abs(now - ts) > 60:
            assert verdict == "stale"
        elif (ts, f"n{nonce}") in accepted:
            assert verdict == "replayed"
        else:
            assert verdict == "fresh"
            accepted[(ts, f"n{nonce}")] = now
        assert len(guard) == sum(1 for (t, _n) in accepted if t + 60 >= now)
