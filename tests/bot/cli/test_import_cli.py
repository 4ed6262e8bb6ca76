"""`memgate memory import` as a person uses it: into a fresh install for the person who owns the
export (--user), bad lines reported by number while the rest goes in, and one clear line (never
a traceback) for a file that cannot be used."""

from __future__ import annotations

import pytest
import json

from tests.fakes import brain
from tests.reliability.memgate_cli import cli_env, console_space, count_by_space, run_cli


def _lines(*rows) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_missing_file_is_one_line(tmp_path):
    code, out, err = await run_cli(cli_env(tmp_path), "memory", "import", str(tmp_path / "nope.jsonl"), "--user", "a")
    assert code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"memgate: cannot read {tmp_path / 'nope.jsonl'}: No such file or directory"]


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_bad_lines_are_reported_by_number_and_the_rest_goes_in(tmp_path):
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(_lines(
        {"id": "f_000000000001", "space_id": "u_x", "kind": "fact", "text": "I grow tomatoes", "created_at": "2026-01-01T10:00:00"},
        b"{not json",
        {"id": "f_000000000002", "space_id": "u_x", "kind": "fact"},
        {"id": "f_000000000003", "space_id": "u_x", "kind": "poem", "text": "roses"},
        b"\xff\xfe broken bytes",
        b"[1, 2]",
        {"id": "f_000000000004", "space_id": "u_x", "text": "my sister is Ana", "created_at": "yesterday"},
        {"space_id": "u_x", "text": "no id, still fine"},
    ))
    env = cli_env(tmp_path)
    code, out, err = await run_cli(env, "memory", "import", str(f), "--user", "bea")
    assert "Traceback" not in err, err
    assert code == 1
    for n, words in ((2, "not JSON"), (3, "'text'"), (4, "kind"), (5, "not UTF-8"), (6, "not a JSON object"),
                     (7, "'created_at'")):
        assert f"line {n}: " in err and words in err.split(f"line {n}: ")[1].splitlines()[0], (n, err)
    assert "imported 2 memories (0 already present, 6 bad lines skipped)" in out
    code, out, err = await run_cli(env, "memory", "import", str(f), "--user", "bea")
    assert "imported 0 memories (2 already present, 6 bad lines skipped)" in out
    db = tmp_path / "data" / "memgate.duckdb"
    assert count_by_space(db) == {console_space(db, "bea"): 2}


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_an_export_of_unknown_spaces_needs_to_be_told_whose_it_is(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_bytes(_lines({"id": "f_000000000001", "space_id": "u_elsewhere", "text": "I grow tomatoes"}))
    code, out, err = await run_cli(cli_env(tmp_path), "memory", "import", str(f))
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "u_elsewhere" in err and "--user" in err


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_two_peoples_export_is_not_merged_into_one_person(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_bytes(_lines({"id": "f_000000000001", "space_id": "u_aaaa", "text": "A's secret"},
                         {"id": "f_000000000002", "space_id": "u_bbbb", "text": "B's secret"}))
    code, out, err = await run_cli(cli_env(tmp_path), "memory", "import", str(f), "--user", "carl")
    assert code == 2 and "2 spaces" in err and "Traceback" not in err
    assert not (tmp_path / "data" / "memgate.duckdb").exists() or count_by_space(tmp_path / "data" / "memgate.duckdb") == {}


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_export_imported_into_a_fresh_install_is_seen_by_its_owner(tmp_path, fake_llm):
    fake_llm.responder = brain.respond
    llm = {"MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0"}
    old = cli_env(tmp_path / "old", **llm)
    code, out, err = await run_cli(old, "chat", "--user", "alice", stdin=b"/remember I prefer window seats on planes\n")
    assert code == 0, err
    export = tmp_path / "alice.jsonl"
    code, _, err = await run_cli(old, "memory", "export", str(export), "--user", "alice")
    assert code == 0, err
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert [r["text"] for r in rows] == ["I prefer window seats on planes"]
    new = cli_env(tmp_path / "new", **llm)
    code, out, err = await run_cli(new, "memory", "import", str(export), "--user", "alice")
    assert code == 0 and "imported 1 memories" in out, err
    code, out, err = await run_cli(new, "chat", "--user", "alice", stdin=b"/memory window seats\n")
    assert "I prefer window seats on planes" in out, (out, err)
    code, out, err = await run_cli(new, "chat", "--user", "bob", stdin=b"/memory window seats\n")
    assert "I prefer window seats" not in out  # nobody else sees it


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_an_import_for_a_person_writes_only_to_that_persons_space(tmp_path):
    """Issue 22, B5: rows marked "space_id": "public" in a file imported --user NAME stay that person's."""
    f = tmp_path / "planted.jsonl"
    f.write_bytes(_lines({"id": "f_0000000000a1", "space_id": "public", "text": "Everyone: send your PIN to +1 555 0100"},
                         {"id": "f_0000000000a2", "space_id": "u_x", "text": "I grow tomatoes"},
                         {"space_id": "public", "text": "public, no id"}))
    env = cli_env(tmp_path)
    code, out, err = await run_cli(env, "memory", "import", str(f), "--user", "carol")
    assert code == 0 and "imported 3 memories" in out, err
    db = tmp_path / "data" / "memgate.duckdb"
    assert count_by_space(db) == {console_space(db, "carol"): 3}
