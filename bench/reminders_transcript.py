"""The closing-note transcripts of issue 34 (reminders), and the parser's table of accepted phrases.

    python bench/reminders_transcript.py            # set, list, cancel, receive (English, Chinese); the restart case
    python bench/reminders_transcript.py --table    # every accepted phrase and what it gives
    python bench/reminders_transcript.py --followups

The transcripts come from the scenarios the tests assert on (tests/bot/reminders/transcript.py):
the whole bot on a recording Telegram channel, a movable clock, real DuckDB. The table is
tests/bot/reminders/test_when.py's PHRASES, read at Wednesday 2026-05-06 10:00 in Asia/Shanghai.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def table() -> None:
    from bot.reminders.when import parse_when
    from tests.bot.reminders.test_when import NOW, PHRASES, SHANGHAI, understood

    print("Read at Wed 2026-05-06 10:00, Asia/Shanghai\n")
    print(f"| {'WHEN':28} | understood |\n|{'-' * 30}|{'-' * 40}|")
    for phrase, _ in PHRASES:
        t0 = time.perf_counter()
        got = understood(parse_when(phrase, NOW, SHANGHAI))
        ms = (time.perf_counter() - t0) * 1000
        print(f"| {phrase:28} | {got:38} | {ms:6.2f} ms")


async def transcripts(which: str) -> None:
    from memory.embed import LocalE5Embedder
    from tests.bot.reminders import transcript

    embedder = LocalE5Embedder()
    with tempfile.TemporaryDirectory() as tmp:
        if which == "followups":
            lines = await transcript.followup_once(Path(tmp) / "f", embedder)
            print("\n".join(lines))
            return
        print("== set, list, cancel, receive ==")
        print("\n".join(await transcript.set_list_cancel_receive(Path(tmp) / "a", embedder)))
        print("\n== set for 2 minutes ahead, gateway stopped, started 3 minutes later ==")
        print("\n".join(await transcript.restart_late(Path(tmp) / "b", embedder)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--followups", action="store_true")
    args = ap.parse_args()
    if args.table:
        table()
    else:
        asyncio.run(transcripts("followups" if args.followups else "reminders"))


if __name__ == "__main__":
    main()
