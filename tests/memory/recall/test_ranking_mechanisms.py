"""Pure scoring functions of recall's later mechanisms, tested directly."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memory.recall import ranking
from memory.text import PHATIC_WORDS, STOPWORDS, tokenize

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


def test_phatic_share_is_about_what_is_said_not_how_long():
    def share(text, names=frozenset()):
        return ranking.phatic_share(tokenize(text), STOPWORDS, PHATIC_WORDS | names)

    assert share("Hey Mel, how are you? Thanks, great!", frozenset({"mel"})) == 1.0
    assert share("谢谢你，太好了！") == 1.0
    assert share("I went to the pottery class on Tuesday and made a blue bowl") == 0.0
    # A short statement is not small talk; a long greeting is.
    assert share("Bowl: blue.") == 0.0
    assert share("Hi hi hi, thanks so much, that is awesome, wow, great, congrats, really nice!") == 1.0
    assert ranking.phatic_share([], STOPWORDS, PHATIC_WORDS) == 0.0


def test_phatic_discount_lowers_small_talk_only():
    out = ranking.phatic_discount({"talk": 1.0, "fact": 0.8}, {"talk": 1.0, "fact": 0.0}, 0.5)
    assert out == {"talk": 0.5, "fact": 0.8}


def test_feedback_query_moves_towards_the_feedback_and_stays_unit():
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    fb = [np.array([0.0, 1.0, 0.0], dtype=np.float32)]
    out = ranking.feedback_query(q, fb, 0.5)
    assert abs(float(np.linalg.norm(out)) - 1.0) < 1e-6 and out[1] > 0 and out[0] > out[1]
    assert np.array_equal(ranking.feedback_query(q, [], 0.5), q)
