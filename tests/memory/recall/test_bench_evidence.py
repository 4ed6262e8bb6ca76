"""The recall bench's scoring rules: evidence ids as the data writes them, expanded and repaired,
unknown ids kept (a miss, not a question made easier), a turn's own time used."""

from hypothesis import given, strategies as st

from bench.recall_locomo import load_turns, normalise_evidence


def test_ranges_lists_and_malformed_ids():
    assert normalise_evidence(["D12:3-D12:5"]) == ["D12:3", "D12:4", "D12:5"]
    assert normalise_evidence(["D12:3-5"]) == ["D12:3", "D12:4", "D12:5"]
    assert normalise_evidence(["D8:6; D9:17", "D9:1 D4:4 D4:6"]) == ["D8:6", "D9:17", "D9:1", "D4:4", "D4:6"]
    assert normalise_evidence(["D:11:26", "D30:05", "D30:5"]) == ["D11:26", "D30:5"]
    # A range over two sessions: its two ends (what lies between is not knowable from the ids).
    assert normalise_evidence(["D3:7-D4:2"]) == ["D3:7", "D4:2"]
    # Unknown ids are kept: the bench counts them as misses.
    assert normalise_evidence(["D999:1"]) == ["D999:1"]
    assert normalise_evidence([]) == []


@given(st.integers(1, 60), st.integers(1, 80), st.integers(0, 30), st.booleans())
def test_a_range_is_every_id_in_it(session, first, span, short):
    last = first + span
    text = f"D{session}:{first}-{last}" if short else f"D{session}:{first}-D{session}:{last}"
    assert normalise_evidence([text]) == [f"D{session}:{i}" for i in range(first, last + 1)]


def test_a_turns_own_time_wins_over_its_sessions():
    conv = {"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023",
                             "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"},
                                           {"speaker": "B", "dia_id": "D1:2", "text": "yo", "time": "2023-05-09T08:00:00"}]}}
    turns, last = load_turns(conv, "s")
    assert [t.created_at.isoformat() for t in turns] == ["2023-05-08T13:56:00", "2023-05-09T08:00:00.000001"]
    assert last == turns[-1].created_at
