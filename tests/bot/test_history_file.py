"""The terminal's input history (a file in the data folder) loses what is forgotten or erased
(issue 35), written by prompt_toolkit's own FileHistory as the line editor writes it."""

from __future__ import annotations

from prompt_toolkit.history import FileHistory

from bot.history_file import scrub


def test_entries_holding_a_forgotten_text_go_and_the_rest_stays(tmp_path):
    path = tmp_path / "console_history"
    h = FileHistory(str(path))
    for line in ("/remember my locker code is QUOKKA7731", "ok", "ok thanks, see you", "two\nlines about QUOKKA7731",
                 "what is the weather"):
        h.store_string(line)
    assert scrub(path, ["my locker code is QUOKKA7731", "QUOKKA7731", "ok"]) == 3
    assert list(FileHistory(str(path)).load_history_strings()) == ["what is the weather", "ok thanks, see you"]
    assert path.stat().st_mode & 0o777 == 0o600
    assert scrub(path, ["nothing like it"]) == 0 and scrub(tmp_path / "none", ["x"]) == 0
