"""Pure scoring functions of recall's later mechanisms, tested directly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memory.recall import ranking

SCORES = st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0.0, 1.0), min_size=1)


@given(SCORES, st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from(["s1", "s2", None])), st.floats(0.0, 1.0))
def test_session_evidence_pulls_towards_the_sessions_best_and_never_past_it(scores, sessions, w):
    out = ranking.session_evidence(scores, sessions, w)
    assert out.keys() == scores.keys()
    for d, sc in scores.items():
        sess = sessions.get(d)
        if sess is None:
            assert out[d] == sc
        else:
            best = max(v for e, v in scores.items() if sessions.get(e) == sess)
            assert sc - 1e-12 <= out[d] <= best + 1e-12


def test_a_turn_of_the_best_session_overtakes_a_stray_hit():
    scores = {"hit": 0.9, "mate": 0.5, "stray": 0.6}
    out = ranking.session_evidence(scores, {"hit": "s1", "mate": "s1", "stray": "s2"}, 0.3)
    assert out["hit"] == 0.9 and out["mate"] > out["stray"]


def test_a_run_of_messages_gains_what_it_says_beyond_its_best_message():
    """A name said in one message and its attribute in the next: the run of the two holds both
    query words, so it gains; a neighbour that only repeats the hit's words gains nothing, and
    the run from a hit to a neighbour two away counts the message between (on that side only)."""
    from collections import Counter
    from datetime import datetime, timedelta

    from memory.recall import ranking

    t0 = datetime(2024, 4, 1)
    at = {"prev": t0, "hit": t0 + timedelta(seconds=30), "next": t0 + timedelta(seconds=60), "two": t0 + timedelta(seconds=90)}
    counts = {"prev": Counter({"饭店": 1}), "hit": Counter({"饭店": 1, "北京": 1}), "next": Counter({"地址": 1, "东城区": 1}),
              "two": Counter({"好": 1})}
    idf = {"北京": 1.0, "饭店": 1.0, "地址": 2.0, "东城区": 3.0}
    near = {"hit": [("prev", 1), ("next", 1), ("two", 2)]}
    gains = ranking.run_gains(near, at, counts, idf, 2.0, 1.2, 0.75, scale=1.0)
    assert ("hit", "prev") not in gains            # prev repeats 饭店: nothing new
    assert gains[("hit", "next")] > 0              # the attribute's words join the name's
    assert gains[("hit", "two")] > 0               # the run to "two" holds "next" as well
    # The run scores the hit score + gain: it lends weight x that, and the hit rises by its best gain.
    scores = {"hit": 1.0}
    out = ranking.expand_to_neighbours(scores, near, top=1, weight=0.5, decay=1.0, gains=gains)
    assert out["next"] == 0.5 * (1.0 + gains[("hit", "next")]) and out["prev"] == 0.5
    assert out["hit"] == 1.0 + max(gains.values())
    assert ranking.expand_to_neighbours(scores, near, top=1, weight=0.5, decay=1.0) == \
        ranking.expand_to_neighbours(scores, near, top=1, weight=0.5, decay=1.0, gains={})
