"""The recall bench's scoring rules: evidence ids as the data writes them, expanded and repaired,
unknown ids kept (a miss, not a question made easier), a turn's own time used."""

from hypothesis import given, strategies as st

from bench.recall_data import load_turns, normalise_evidence


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


def test_a_turn_time_the_bench_cannot_read_falls_back_to_its_sessions_date():
    """A Chinese turn time is read; a free-text one that is no date falls back to the session's
    date (+ 30 s per turn); LoCoMo's own free-text dates work as turn times too; a session date
    that cannot be read follows the previous session. Before: fromisoformat stopped the run."""
    conv = {"conversation": {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi", "time": "2024年04月01日 周一 08:25"},
                      {"speaker": "B", "dia_id": "D1:2", "text": "yo", "time": "some evening in spring"},
                      {"speaker": "A", "dia_id": "D1:3", "text": "ok", "time": "7:05 pm on 9 May, 2023"}],
        "session_2_date_time": "the day after",
        "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "again", "time": "2024年4月2日"}],
        "session_3_date_time": "不知道哪天",
        "session_3": [{"speaker": "A", "dia_id": "D3:1", "text": "and again"}]}}
    turns, last = load_turns(conv, "s")
    at = [t.created_at.replace(microsecond=0).isoformat() for t in turns]
    assert at == ["2024-04-01T08:25:00", "2023-05-08T13:56:30", "2023-05-09T19:05:00", "2024-04-02T00:00:00",
                  "2023-05-10T13:56:00"]
    assert last == max(t.created_at for t in turns)


def test_an_evidence_turn_folded_into_an_earlier_identical_row_is_found_with_it(tmp_path, embedder):
    """Ingest drops an exact repeat (content hash) and keeps the first row: the repeat's turn id
    is in memory as that row, so finding the row finds it. Before, it could never be found."""
    from bench.recall_locomo import folded_turns, ingest
    from memory.store.connection import Store

    conv = {"conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023",
                             "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "好的，谢谢"},
                                           {"speaker": "B", "dia_id": "D1:2", "text": "不客气"}],
                             "session_2_date_time": "2:00 pm on 9 May, 2023",
                             "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "好的，谢谢！"[:-1]}]}}
    turns, _ = load_turns(conv, "s")
    store = Store(tmp_path / "m.duckdb", embedder.dim)
    try:
        ingest(store, embedder, turns)
        folded = folded_turns(store, turns)
    finally:
        store.close()
    assert sorted(sorted(ts) for ts in folded.values()) == [["D1:1", "D2:1"], ["D1:2"]]


def test_a_dialogue_question_is_asked_as_the_product_would_ask_it():
    from bench.recall_data import as_dialogue

    q = "Bart: I got a perfect score!\nAssistant: Wow, great!\nBart: How should I celebrate?"
    assert as_dialogue(q) == ([("user", "I got a perfect score!"), ("assistant", "Wow, great!")], "How should I celebrate?")
    assert as_dialogue("What did Caroline research?") == ([], "What did Caroline research?")
    assert as_dialogue("Bart：嘿！\n助手：你好\nBart：我要表演魔术") == ([("user", "嘿！"), ("assistant", "你好")], "我要表演魔术")
