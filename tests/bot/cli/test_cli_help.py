"""`memgate --help` and every subcommand's and sub-subcommand's `--help` print what
`cli_help.txt` holds: the command line's surface, fixed before bot/ was split into packages
(issue 21) so a move that drops an option, a choice or a help line shows as a diff.

The commands are found by walking the parser, and each `--help` is printed by a real
`python -m bot.cli` at 100 columns. Regenerate on purpose with `python tests/bot/test_cli_help.py`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).with_name("cli_help.txt")
COLUMNS = "100"


def command_paths() -> list[tuple[str, ...]]:
    """() for `memgate`, then every subcommand and sub-subcommand, in the parser's order."""
    sys.path.insert(0, str(ROOT))
    from bot.cli import parser

    found: list[tuple[str, ...]] = []

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        found.append(path)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(parser(), ())
    return found


def help_text() -> str:
    """Every `--help`, each under a `$ memgate ... --help` line."""
    env = {**os.environ, "COLUMNS": COLUMNS, "LINES": "50", "PYTHONIOENCODING": "utf-8"}
    env.pop("MEMGATE_CONFIG", None)
    parts = []
    for path in command_paths():
        out = subprocess.run([sys.executable, "-m", "bot.cli", *path, "--help"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and not out.stderr, (path, out.returncode, out.stderr)
        parts.append(f"$ memgate {' '.join((*path, '--help'))}\n{out.stdout}")
    return "\n".join(parts)


def test_every_help_text_is_unchanged():
    assert FIXTURE.read_text(encoding="utf-8") == help_text()


if __name__ == "__main__":
    FIXTURE.write_text(help_text(), encoding="utf-8")
    print(f"wrote {FIXTURE}")
