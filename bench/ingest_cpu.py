"""CPU per ingested turn: what the ingest worker (and the task assignment after it) costs the
gateway's process per turn, model and embeddings apart, on a table the size of a busy month.

The figure the soak cannot give cleanly on a shared machine: the soak's CPU mixes replies and
ingest and moves with the machine's load. Here one child process (the gateway's part: real
DuckDB, the real IngestWorker, TaskProcessor, litellm and its embedder client) ingests `--turns`
queued turns of `--spaces` busy chats from a table already holding `--rows` memories per space;
the fake OpenAI-compatible server (chat answers from tests/fakes/brain.py, embeddings) runs in
this process, so its CPU is not counted. The child reports its CPU (user + system, all
threads) per ingested turn, wall time and model calls per turn; `--code DIR` runs the child
from another checkout (the "before" of a change), `--py-spy FILE` records it.

    python bench/ingest_cpu.py [--spaces 30] [--rows 400] [--turns 300] [--code DIR] [--py-spy FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--child" not in sys.argv:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOPICS = ("my sister Ana lives in Lisbon", "I play the cello on Sundays", "my dog Pico is afraid of thunder",
          "I am learning Japanese with an app", "my favourite tea is genmaicha", "I cycle to work along the river",
          "our flat has a small balcony with tomatoes", "I am allergic to penicillin", "what should I cook tonight?",
          "I run a book club on Thursdays", "my grandfather was a watchmaker in Geneva", "how far is Porto from Lisbon?")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def child(args: argparse.Namespace) -> None:
    """The gateway's part, from whatever checkout PYTHONPATH names."""
    import numpy as np

    from memory.embed import LiteLLMEmbedder
    from memory.engine import MemoryEngine
    from memory.ingest.capture import CapturedTurn, TurnMessage, capture
    from memory.llm import LiteLLM, LLMSettings
    from memory.store.connection import Store
    from memory.store.rows import NewMemory, insert_memories
    from memory.tasks.processor import TaskProcessor

    start = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    now = [start]
    clock = lambda: now[0]  # noqa: E731
    rng = np.random.default_rng(7)
    with Store(Path(args.db), 384) as store:
        for s in range(args.spaces):  # the month before: chunks and facts of every chat, interleaved
            rows = [NewMemory(space_id=f"chat:{s}", kind="chunk" if i % 3 else "fact", role="user",
                              text=f"{TOPICS[(s + i) % len(TOPICS)]} (old note {i} of chat {s})", title=f"old note {i}",
                              created_at=(start - timedelta(days=30, minutes=i)).replace(tzinfo=None))
                    for i in range(args.rows)]
            vecs = rng.normal(size=(len(rows), 384)).astype(np.float32)
            store.write(lambda c, rows=rows, vecs=vecs: insert_memories(c, rows, vecs / np.linalg.norm(vecs, axis=1, keepdims=True)))
        for t in range(args.turns):  # the busy chats' turns, queued as the gateway queues them
            s, i = t % args.spaces, t // args.spaces
            now[0] = start + timedelta(seconds=t)
            text = f"{TOPICS[(s * 7 + i) % len(TOPICS)]} (chat {s} message {i})"
            capture(store, CapturedTurn(space_id=f"chat:{s}", session_id=f"sess-{s}", turn_id=f"chat:{s}:{i}",
                                        created_at=now[0], messages=(TurnMessage("user", text),
                                                                     TurnMessage("assistant", f"You said: {text}"))))
        llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=args.base, api_key="sk-test", retries=0))
        embedder = LiteLLMEmbedder("openai/fake-embed", 384, api_base=args.base, api_key="sk-test")
        engine = MemoryEngine(store, embedder, llm, clock=clock)
        tasks = TaskProcessor(store, embedder, llm, clock=clock)
        engine.worker.on_ingested, engine.worker.task_gap = tasks.assign, tasks.settings.idle_gap
        llm.warm()
        embedder.embed_passages(["warm up"])
        print("ready", flush=True)
        sys.stdin.readline()  # the parent starts py-spy, then says go
        c0, t0 = cpu_s(), time.perf_counter()
        done = await engine.worker.drain()
        cpu, wall = cpu_s() - c0, time.perf_counter() - t0
        total = store.read(lambda c: c.execute("SELECT count(*) FROM memories").fetchone()[0])
        print(json.dumps({"turns": done, "cpu_s": cpu, "wall_s": wall, "rows": int(total),
                          "calls": dict(llm.usage.calls)}), flush=True)


async def parent(args: argparse.Namespace) -> int:
    from bench.cpu_profile import read_raw, report
    from bench.soak import kind_of, load
    from tests.fakes import brain
    from tests.fakes.llm_server import FakeLLM

    code = str(Path(args.code).resolve()) if args.code else str(ROOT)
    calls: dict[str, int] = {}

    def respond(req: dict) -> str:
        kind = kind_of(req)
        calls[kind] = calls.get(kind, 0) + 1
        return brain.respond(req)

    with tempfile.TemporaryDirectory(prefix="memgate-ingest-cpu-") as tmp:
        async with FakeLLM(responder=respond) as llm:
            env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")} | {"PYTHONPATH": code}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(Path(__file__).resolve()), "--child", "--db", str(Path(tmp) / "m.duckdb"),
                "--base", llm.base_url, "--spaces", str(args.spaces), "--rows", str(args.rows), "--turns", str(args.turns),
                cwd=code, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
            assert proc.stdout is not None and proc.stdin is not None
            line = await proc.stdout.readline()
            if line.strip() != b"ready":
                print(f"the child did not start: {line!r}")
                return 1
            spy = None
            if args.py_spy:
                spy = await asyncio.create_subprocess_exec(
                    "py-spy", "record", "--pid", str(proc.pid), "--format", "raw", "--output", args.py_spy,
                    "--rate", "50", "--threads", "--nonblocking",
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
                await asyncio.sleep(2.0)  # py-spy attached before the drain starts
            before = load()
            calls.clear()
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
            result = json.loads(await proc.stdout.readline())
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                await spy.wait()
            await proc.wait()
    n = max(result["turns"], 1)
    print(f"ingest CPU ({code}): {result['turns']} turns of {args.spaces} chats, table {args.rows} rows per chat "
          f"before ({result['rows']} after)")
    print(f"  CPU {1000 * result['cpu_s'] / n:.1f} ms per ingested turn ({result['cpu_s']:.1f} s), wall "
          f"{result['wall_s']:.1f} s ({result['turns'] / result['wall_s']:.1f} turns/s); model calls per turn: "
          + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(calls.items())) + f"; load before {before}, after {load()}")
    if args.py_spy and Path(args.py_spy).exists():
        print("\n".join(report(read_raw(Path(args.py_spy)), result["cpu_s"], n, n)))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=30)
    parser.add_argument("--rows", type=int, default=400, help="memories per chat already in the table")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--code", metavar="DIR", help="run the ingest from this checkout")
    parser.add_argument("--py-spy", metavar="FILE")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    return asyncio.run(child(args)) or 0 if args.child else asyncio.run(parent(args))


if __name__ == "__main__":
    raise SystemExit(main())
