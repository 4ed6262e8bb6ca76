"""The import graph in numbers: modules and lines per part, arrows between parts, circles.

A part is a package one level under memory/, bot/ or adapters/ (bot.access, memory.store,
adapters.telegram) or a module at the top of one (bot.app, memory.engine, adapters.console). Imports are read as
tests/test_layers.py reads them (function-level and TYPE_CHECKING imports count).

    python bench/import_graph.py            # every part
    python bench/import_graph.py --only bot # bot's parts, and the arrows between them
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_layers import all_modules, cycles, import_graph  # noqa: E402


def part_of(module: str) -> str:
    """bot.access.policy -> bot.access; bot.app -> bot.app; bot -> bot (the package's __init__)."""
    return ".".join(module.split(".")[:2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="count only the parts under this top package (bot, memory, adapters)")
    args = ap.parse_args()
    modules = all_modules()
    graph = import_graph()
    keep = (lambda m: m == args.only or m.startswith(args.only + ".")) if args.only else (lambda m: True)
    part = {m: part_of(m) for m in modules}
    count, lines = Counter(), Counter()
    for m, path in modules.items():
        if keep(m):
            count[part[m]] += 1
            lines[part[m]] += len(path.read_text(encoding="utf-8").splitlines())
    module_arrows = [(a, b) for a, targets in graph.items() for b in targets if keep(a) and keep(b)]
    crossing = Counter((part[a], part[b]) for a, b in module_arrows if part[a] != part[b])
    part_graph: dict[str, set[str]] = {p: set() for p in count}
    for a, b in crossing:
        part_graph[a].add(b)
    width = max(len(p) for p in count)
    print(f"{'part':<{width}} | modules | lines | imports (parts)")
    for p in sorted(count):
        targets = ", ".join(sorted(part_graph[p])) or "-"
        print(f"{p:<{width}} | {count[p]:>7} | {lines[p]:>5} | {targets}")
    print(f"\nmodules: {sum(count.values())}, lines: {sum(lines.values())}, parts: {len(count)}")
    print(f"module arrows: {len(module_arrows)} ({len(module_arrows) - sum(crossing.values())} inside a part, "
          f"{sum(crossing.values())} between parts)")
    print(f"part arrows: {len(crossing)}")
    sub = {m: {t for t in ts if keep(t)} for m, ts in graph.items() if keep(m)}
    print(f"module circles: {len(cycles(sub))}, part circles: {len(cycles(part_graph))}")
    for c in cycles(part_graph):
        print("  part circle:", " <-> ".join(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
