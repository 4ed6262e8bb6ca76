"""The reliability ledger: run every registered scenario and print what went in and what came out.

Each scenario (tests/reliability/, registered with `@scenario` in a module listed in
`tests.reliability.harness.SCENARIO_MODULES`) drives the real bot — real `memgate` processes
killed with SIGKILL, real channel clients against the protocol fakes, real DuckDB — and counts
messages in, answered, stored, lost, leaked and answered twice. Exits 1 if any row lost,
leaked or answered twice anything (or a scenario crashed), so CI can run it.

    python bench/reliability.py            # every scenario
    python bench/reliability.py telegram   # the scenarios whose name contains "telegram"
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.reliability.harness import Counts, load_all  # noqa: E402

COLUMNS = ("scenario", "in", "answered", "stored", "lost", "leaked", "twice", "seconds")


def table(rows: list[tuple[Counts, float]]) -> str:
    """The ledger as a fixed-width table, one row per scenario."""
    cells = [COLUMNS] + [(c.scenario, str(c.messages_in), str(c.answered), str(c.stored), str(c.lost),
                          str(c.leaked), str(c.answered_twice), f"{s:.1f}") for c, s in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]

    def line(r: tuple[str, ...]) -> str:
        return " | ".join(v.ljust(widths[i]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(r))

    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


async def run(selected: list[str]) -> int:
    scenarios = load_all()
    names = [n for n in scenarios if not selected or any(s in n for s in selected)]
    rows: list[tuple[Counts, float]] = []
    failed = 0
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="memgate-reliability-") as tmp:
            try:
                counts = await scenarios[name](Path(tmp))
            except Exception as exc:
                traceback.print_exc()
                counts = Counts(scenario=name, messages_in=0, answered=0, stored=0, lost=0, leaked=0,
                                note=f"crashed: {type(exc).__name__}: {exc}"[:200])
                failed += 1
        seconds = time.perf_counter() - started
        rows.append((counts, seconds))
        print(f"[{i}/{len(names)}] {name}: in {counts.messages_in}, lost {counts.lost}, leaked {counts.leaked} "
              f"({seconds:.1f} s){'  ' + counts.note if counts.note else ''}", file=sys.stderr, flush=True)
    print(table(rows))
    # What each row's note says (the trust rows name the tests that cover their finding).
    noted = [(c.scenario, c.note) for c, _ in rows if c.note]
    if noted:
        print("\nnotes:")
        for name, note in noted:
            print(f"- {name}: {note}")
    bad = [c for c, _ in rows if c.lost or c.leaked or c.answered_twice]
    for c in bad:
        print(f"NOT SAFE: {c.scenario}: lost {c.lost}, leaked {c.leaked}, answered twice {c.answered_twice}",
              file=sys.stderr)
    return 1 if bad or failed else 0


def main() -> int:
    return asyncio.run(run(sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
