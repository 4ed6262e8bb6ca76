"""The restart case in real processes: `memgate chat` sets a reminder a few seconds ahead and
leaves; the reminder falls due while nothing runs; the next `memgate chat` prints it at start,
once, saying it is late and by how much (the in-process version with the issue's 2 and 3
minutes on a movable clock is tests/bot/reminders/test_reminders_chat.py)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.bot.cli.test_cli import env_for, read_reply, start_chat

pytestmark = pytest.mark.timeout(600)  # real processes started twice, on a busy machine
ROOT = str(Path(__file__).resolve().parents[3])


async def test_a_reminder_due_while_no_terminal_ran_is_printed_at_the_next_start(tmp_path, fake_llm):
    env = env_for(tmp_path, fake_llm)
    proc = await start_chat(env)
    proc.stdin.write(b"/remind in 20 seconds stand up and stretch\n")
    await proc.stdin.drain()
    answer = await read_reply(proc, timeout=120)
    assert answer.startswith("OK, I'll remind you on ") and "stand up and stretch" in answer
    due = datetime.strptime(re.search(r"on \w{3} (\d{4}-\d\d-\d\d \d\d:\d\d)", answer).group(1), "%Y-%m-%d %H:%M")
    proc.stdin.close()
    assert (await asyncio.wait_for(proc.wait(), 120)) == 0
    # Nothing runs until the reminder is due and a little more (the due minute shown is rounded down).
    while datetime.now(UTC).replace(tzinfo=None) < due.replace(second=0) or \
            (await _due_at(tmp_path)) > datetime.now(UTC).replace(tzinfo=None):
        await asyncio.sleep(1)
    await asyncio.sleep(3)
    proc = await start_chat(env)
    try:
        printed = await read_reply(proc, timeout=180)       # unasked: the start-up pass sends it
        assert printed == "⏰ Reminder: stand up and stretch"
        late = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        assert re.fullmatch(r"\(Late by \d+ (?:seconds?|minutes?)(?: \d+ minutes?)?: it was due at \d\d:\d\d; I was not running then\.\)", late), late
        proc.stdin.write(b"/reminders\n")
        await proc.stdin.drain()
        assert (await read_reply(proc, timeout=120)).startswith("You have no reminders.")   # sent once, done
    finally:
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 120)
    out = (await proc.stdout.read()).decode()
    assert "⏰" not in out   # nothing more after it


async def _due_at(tmp_path) -> datetime:
    """The reminder's due time from the database the chat left (read by a child: the file is free now)."""
    code = ("import sys; from memory.store.connection import connect; c = connect(sys.argv[1], read_only=True); "
            "print(c.execute('SELECT due_at FROM reminders').fetchone()[0].isoformat())")
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", code, str(tmp_path / "data" / "memgate.duckdb"),
                                                 cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                                                 stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await child.communicate()
    assert child.returncode == 0, err.decode()[-500:]
    return datetime.fromisoformat(out.decode().strip())
