"""The closing-note transcripts of issue 34 (reminders), and the parser's table of accepted phrases.

    python bench/reminders_transcript.py            # set, list, cancel, receive (English, Chinese); the restart case
    python bench/reminders_transcript.py --table    # every accepted phrase and what it gives
    python bench/reminders_transcript.py --followups
    python bench/reminders_transcript.py --scan     # the follow-up date finder over 2000 memory texts (no LLM)

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


def scan(n: int = 2000) -> None:
    """What finding plan dates costs: bot.reminders.followups.event_day over n memory-like texts."""
    import random
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from bot.reminders.followups import event_day

    zone, said = ZoneInfo("Asia/Shanghai"), datetime(2026, 5, 6, 2, 0, tzinfo=UTC)
    rng = random.Random(1)
    words = ("I really like the new coffee place near the office and my sister visits often in summer "
             "我们 周末 一起 吃饭 很 开心").split()
    for label, extra in (("no day in them", []), ("half name a day", ["on friday", "下周二"])):
        texts = [" ".join(rng.choice(words + extra * 3) for _ in range(16)) for _ in range(n)]
        t0 = time.perf_counter()
        found = sum(1 for x in texts if event_day(x, said, zone))
        ms = (time.perf_counter() - t0) * 1000
        print(f"{n} texts ({label}, {sum(map(len, texts)) / n:.0f} chars): {ms:.0f} ms, {found} with a day, 0 LLM calls")


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
    ap.add_argument("--scan", action="store_true")
    args = ap.parse_args()
    if args.table:
        table()
    elif args.scan:
        scan()
    else:
        asyncio.run(transcripts("followups" if args.followups else "reminders"))


if __name__ == "__main__":
    main()
