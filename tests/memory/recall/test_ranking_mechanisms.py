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
