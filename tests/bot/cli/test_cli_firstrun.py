"""The command line as a new user meets it (issue 15): help for every option, empty results
that say so, a pipe closed early (`| head`) that stays quiet, no agent tool names in /tasks,
a benchmark without its data naming the file."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bot.cli import parser
from bot.turn.views.tasks import TaskView, format_tasks

ROOT = str(Path(__file__).resolve().parents[3])


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))}
    (tmp_path / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ROOT,
                "MEMGATE_CONFIG": str(tmp_path / "none.toml")}, **extra)
    return env


def _memgate(tmp_path: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], env=_env(tmp_path), cwd=ROOT,
                          capture_output=True, text=True, timeout=120, **kw)


def _walk(p: argparse.ArgumentParser, path: str):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_and_argument_of_every_command_has_help():
    missing = [f"{path}: {'/'.join(a.option_strings) or a.dest}" for path, a in _walk(parser(), "memgate")
               if not (a.help and a.help.strip()) and a.help is not argparse.SUPPRESS]
    assert missing == []


def test_every_subcommand_has_help_in_its_parent_listing():
    def subs(p, path):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {c.dest for c in action._choices_actions if c.help}
                for name, sub in action.choices.items():
                    yield f"{path} {name}", name in helped
                    yield from subs(sub, f"{path} {name}")
    assert [name for name, ok in subs(parser(), "memgate") if not ok] == []


def test_empty_memory_list_and_pairing_list_say_so(tmp_path):
    out = _memgate(tmp_path, "memory", "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no memories"
    out = _memgate(tmp_path, "pairing", "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no pending pairing requests"


def test_export_into_a_pipe_closed_early_is_quiet(tmp_path):
    for n in range(3):
        assert _memgate(tmp_path, "public", "add", f"shared note number {n}").returncode == 0
    # `memgate memory export | head -1` through a real shell pipe ...
    piped = subprocess.run(f"{sys.executable} -m bot.cli memory export --space public | head -1", shell=True, env=_env(tmp_path),
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert piped.stdout.count("\n") == 1 and "shared note" in piped.stdout
    assert piped.stderr == ""
    # ... and a reader that is gone before the first line is written (the write certainly fails).
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "memory", "export", "--space", "public"], env=_env(tmp_path), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err and err == ""


def test_tasks_list_tells_the_person_how_to_ask_not_the_tool_name():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    view = TaskView(id="t1", space_id="s", session_id=None, title="Plan the trip", status="completed", chunk_count=6,
                    started_at=now, last_at=now, closed_at=now, summary="x", skip_reason=None, first_user_text="plan")
    text = format_tasks([view])
    assert "task_summary" not in text
    assert "/tasks t1" in text and "ask me" in text.lower()


def test_locomo_bench_without_its_data_names_the_file_and_the_readme_line(tmp_path):
    missing = tmp_path / "nowhere" / "locomo.json"
    out = subprocess.run([sys.executable, "bench/recall_locomo.py", "--data", str(missing)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert str(missing) in out.stderr
    readme = Path(ROOT, "README.md").read_text()
    hint = out.stderr.strip().splitlines()[-1]
    # The line it quotes is in the README, and the README line says where the data comes from.
    quoted = hint.split("README: ", 1)[1].strip()
    assert quoted in readme and "locomo" in quoted.lower()
